#include "daemon/events/msgpack_writer.h"

#include <bit>

namespace kvstrata {

void MsgpackWriter::BigEndian(uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) Byte(static_cast<uint8_t>(value >> (8 * i)));
}

void MsgpackWriter::Head(uint8_t code, uint64_t value, int bytes) {
  Byte(code);
  BigEndian(value, bytes);
}

void MsgpackWriter::Nil() { Byte(0xc0); }

void MsgpackWriter::Bool(bool value) { Byte(value ? 0xc3 : 0xc2); }

void MsgpackWriter::Uint(uint64_t value) {
  if (value < 0x80) {
    Byte(static_cast<uint8_t>(value));
  } else if (value <= 0xff) {
    Head(0xcc, value, 1);
  } else if (value <= 0xffff) {
    Head(0xcd, value, 2);
  } else if (value <= 0xffffffffULL) {
    Head(0xce, value, 4);
  } else {
    Head(0xcf, value, 8);
  }
}

void MsgpackWriter::Int(int64_t value) {
  if (value >= 0) return Uint(static_cast<uint64_t>(value));
  if (value >= -32) {
    Byte(static_cast<uint8_t>(value));
  } else if (value >= INT8_MIN) {
    Head(0xd0, static_cast<uint64_t>(value), 1);
  } else if (value >= INT16_MIN) {
    Head(0xd1, static_cast<uint64_t>(value), 2);
  } else if (value >= INT32_MIN) {
    Head(0xd2, static_cast<uint64_t>(value), 4);
  } else {
    Head(0xd3, static_cast<uint64_t>(value), 8);
  }
}

void MsgpackWriter::Double(double value) {
  Byte(0xcb);
  BigEndian(std::bit_cast<uint64_t>(value), 8);
}

void MsgpackWriter::Str(std::string_view value) {
  const uint64_t n = value.size();
  if (n < 32) {
    Byte(static_cast<uint8_t>(0xa0 | n));
  } else if (n <= 0xff) {
    Head(0xd9, n, 1);
  } else if (n <= 0xffff) {
    Head(0xda, n, 2);
  } else {
    Head(0xdb, n, 4);
  }
  out_.append(value);
}

void MsgpackWriter::ArrayHeader(uint32_t size) {
  if (size < 16) {
    Byte(static_cast<uint8_t>(0x90 | size));
  } else if (size <= 0xffff) {
    Head(0xdc, size, 2);
  } else {
    Head(0xdd, size, 4);
  }
}

void MsgpackWriter::MapHeader(uint32_t size) {
  if (size < 16) {
    Byte(static_cast<uint8_t>(0x80 | size));
  } else if (size <= 0xffff) {
    Head(0xde, size, 2);
  } else {
    Head(0xdf, size, 4);
  }
}

}  // namespace kvstrata
