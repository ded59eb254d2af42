#include "daemon/events/msgpack_writer.h"

#include <string>

#include "gtest/gtest.h"

namespace kvstrata {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

TEST(MsgpackWriterTest, UnsignedIntegersUseTheSmallestForm) {
  MsgpackWriter w;
  w.Uint(0);
  w.Uint(127);
  w.Uint(128);
  w.Uint(256);
  w.Uint(65536);
  w.Uint(0xfedcba9876543210ULL);
  EXPECT_EQ(w.bytes(), Bytes({0x00, 0x7f, 0xcc, 0x80, 0xcd, 0x01, 0x00, 0xce, 0x00, 0x01, 0x00,
                              0x00, 0xcf, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10}));
}

TEST(MsgpackWriterTest, SignedIntegers) {
  MsgpackWriter w;
  w.Int(-1);
  w.Int(-32);
  w.Int(-33);
  w.Int(-129);
  w.Int(5);
  EXPECT_EQ(w.bytes(), Bytes({0xff, 0xe0, 0xd0, 0xdf, 0xd1, 0xff, 0x7f, 0x05}));
}

TEST(MsgpackWriterTest, DoubleNilBoolStrings) {
  MsgpackWriter w;
  w.Double(1.5);
  w.Nil();
  w.Bool(true);
  w.Bool(false);
  w.Str("CPU");
  EXPECT_EQ(w.bytes(),
            Bytes({0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0xc0, 0xc3, 0xc2, 0xa3, 'C', 'P', 'U'}));
  MsgpackWriter long_str;
  long_str.Str(std::string(40, 'x'));
  EXPECT_EQ(long_str.bytes().substr(0, 2), Bytes({0xd9, 40}));
  EXPECT_EQ(long_str.bytes().size(), 42u);
}

TEST(MsgpackWriterTest, ContainerHeaders) {
  MsgpackWriter w;
  w.ArrayHeader(3);
  w.ArrayHeader(16);
  w.MapHeader(2);
  w.MapHeader(70000);
  EXPECT_EQ(w.bytes(), Bytes({0x93, 0xdc, 0x00, 0x10, 0x82, 0xdf, 0x00, 0x01, 0x11, 0x70}));
}

}  // namespace
}  // namespace kvstrata
