#include "daemon/events/event_encoder.h"

#include <string>

#include "daemon/common/tier_table.h"
#include "gtest/gtest.h"
#include "msgpack/pack.hpp"
#include "msgpack/sbuffer.hpp"

namespace kvstrata {
namespace {

// The expected bytes, written with msgpack-cxx's packer call by call.
struct Want {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pack{buffer};
  void ArrayHeader(uint32_t n) { pack.pack_array(n); }
  void MapHeader(uint32_t n) { pack.pack_map(n); }
  void Uint(uint64_t v) { pack.pack_uint64(v); }
  void Int(int64_t v) { pack.pack_int64(v); }
  void Double(double v) { pack.pack_double(v); }
  void Nil() { pack.pack_nil(); }
  void Str(std::string_view v) {
    pack.pack_str(static_cast<uint32_t>(v.size()));
    pack.pack_str_body(v.data(), static_cast<uint32_t>(v.size()));
  }
  std::string bytes() const { return std::string(buffer.data(), buffer.size()); }
};

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

// The forms msgspec writes (and vLLM's decoder reads): each integer in its smallest
// form, float64 timestamps, str8 past 31 bytes, array16 / map32 headers.
TEST(MsgpackFormsTest, ThePackerWritesWhatMsgspecWrites) {
  Want w;
  for (uint64_t v : {0ULL, 127ULL, 128ULL, 256ULL, 65536ULL, 0xfedcba9876543210ULL}) w.Uint(v);
  EXPECT_EQ(w.bytes(), Bytes({0x00, 0x7f, 0xcc, 0x80, 0xcd, 0x01, 0x00, 0xce, 0x00, 0x01, 0x00,
                              0x00, 0xcf, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10}));
  Want s;
  for (int64_t v : {-1, -32, -33, -129, 5}) s.Int(v);
  EXPECT_EQ(s.bytes(), Bytes({0xff, 0xe0, 0xd0, 0xdf, 0xd1, 0xff, 0x7f, 0x05}));
  Want d;
  d.Double(1.5);
  d.Nil();
  d.Str("CPU");
  EXPECT_EQ(d.bytes(), Bytes({0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0xc0, 0xa3, 'C', 'P', 'U'}));
  Want l;
  l.Str(std::string(40, 'x'));
  EXPECT_EQ(l.bytes().substr(0, 2), Bytes({0xd9, 40}));
  Want c;
  c.ArrayHeader(3);
  c.ArrayHeader(16);
  c.MapHeader(2);
  c.MapHeader(70000);
  EXPECT_EQ(c.bytes(), Bytes({0x93, 0xdc, 0x00, 0x10, 0x82, 0xdf, 0x00, 0x01, 0x11, 0x70}));
}

KvEvent Stored(std::vector<uint64_t> hashes) {
  KvEvent e;
  e.kind = KvEventKind::kBlockStored;
  e.block_hashes = std::move(hashes);
  e.block_size = 16;
  e.medium = "CPU";
  return e;
}

TEST(ExternalBlockHashTest, LastEightBytesBigEndian) {
  std::string key32(32, '\0');
  for (int i = 0; i < 32; ++i) key32[static_cast<size_t>(i)] = static_cast<char>(i);
  EXPECT_EQ(ExternalBlockHash(key32), 0x18191a1b1c1d1e1fULL);
  EXPECT_EQ(ExternalBlockHash(std::string("\x01\x02", 2)), 0x0102ULL);  // zero-padded left
  EXPECT_EQ(ExternalBlockHash(std::string(8, '\xff')), ~0ULL);
}

// The media and localities the standard tier table (the default configuration's) gives
// the publisher: vLLM's names.
TEST(MediumNameTest, VllmMediaAndLocality) {
  const TierTable tiers = TierTable::Standard();
  EXPECT_EQ(tiers.Of(Tier::kL1).medium, "CPU");
  EXPECT_EQ(tiers.Of(Tier::kL2).medium, "STORAGE");
  EXPECT_EQ(tiers.Of(Tier::kL3).medium, "STORAGE");
  EXPECT_EQ(tiers.Of(Tier::kL1).locality, "LOCAL");
  EXPECT_EQ(tiers.Of(Tier::kL2).locality, "LOCAL");
  EXPECT_EQ(tiers.Of(Tier::kL3).locality, "REMOTE");
}

TEST(EventEncoderTest, ArrayEncodingMatchesVllmArrayLike) {
  KvEventBatch batch{0, 1.5, "m", {}};
  batch.events.push_back(Stored({1, 0xfedcba9876543210ULL}));
  KvEvent removed;
  removed.kind = KvEventKind::kBlockRemoved;
  removed.block_hashes = {1};
  removed.medium = "CPU";
  batch.events.push_back(removed);
  batch.events.push_back(KvEvent{.kind = KvEventKind::kAllBlocksCleared});

  Want want;
  want.ArrayHeader(3);
  want.Double(1.5);
  want.ArrayHeader(3);
  want.ArrayHeader(8);
  want.Str("BlockStored");
  want.ArrayHeader(2);
  want.Uint(1);
  want.Uint(0xfedcba9876543210ULL);
  want.Nil();           // parent_block_hash
  want.ArrayHeader(0);  // token_ids
  want.Uint(16);        // block_size
  want.Nil();           // lora_id
  want.Str("CPU");      // medium
  want.Nil();           // lora_name
  want.ArrayHeader(3);
  want.Str("BlockRemoved");
  want.ArrayHeader(1);
  want.Uint(1);
  want.Str("CPU");
  want.ArrayHeader(1);
  want.Str("AllBlocksCleared");
  want.Int(2);  // data_parallel_rank
  EXPECT_EQ(EncodeEventBatch(batch, 2, EventEncoding::kArray), want.bytes());
}

TEST(EventEncoderTest, MapEncodingNamesEveryField) {
  KvEventBatch batch{0, 2.0, "m", {}};
  KvEvent e = Stored({7});
  e.parent_block_hash = 6;
  e.token_ids = {1, 2};
  e.lora_id = 3;
  e.lora_name = "adapter";
  batch.events.push_back(e);

  Want want;
  want.ArrayHeader(3);
  want.Double(2.0);
  want.ArrayHeader(1);
  want.MapHeader(8);
  want.Str("type");
  want.Str("BlockStored");
  want.Str("block_hashes");
  want.ArrayHeader(1);
  want.Uint(7);
  want.Str("parent_block_hash");
  want.Uint(6);
  want.Str("token_ids");
  want.ArrayHeader(2);
  want.Uint(1);
  want.Uint(2);
  want.Str("block_size");
  want.Uint(16);
  want.Str("lora_id");
  want.Int(3);
  want.Str("medium");
  want.Str("CPU");
  want.Str("lora_name");
  want.Str("adapter");
  want.Int(0);
  EXPECT_EQ(EncodeEventBatch(batch, 0, EventEncoding::kMap), want.bytes());
}

TEST(EventEncoderTest, MapEncodingAddsTheSetOptionalFieldsInOrder) {
  KvEventBatch batch{0, 2.0, "m", {}};
  KvEvent e = Stored({7});
  e.group_idx = 0;
  e.kv_cache_spec_kind = "full_attention";
  e.locality = "LOCAL";
  batch.events.push_back(e);
  KvEvent removed;
  removed.kind = KvEventKind::kBlockRemoved;
  removed.block_hashes = {7};
  removed.medium = "STORAGE";
  removed.locality = "REMOTE";
  batch.events.push_back(removed);

  Want want;
  want.ArrayHeader(3);
  want.Double(2.0);
  want.ArrayHeader(2);
  want.MapHeader(11);
  want.Str("type");
  want.Str("BlockStored");
  want.Str("block_hashes");
  want.ArrayHeader(1);
  want.Uint(7);
  want.Str("parent_block_hash");
  want.Nil();
  want.Str("token_ids");
  want.ArrayHeader(0);
  want.Str("block_size");
  want.Uint(16);
  want.Str("lora_id");
  want.Nil();
  want.Str("medium");
  want.Str("CPU");
  want.Str("lora_name");
  want.Nil();
  want.Str("group_idx");
  want.Uint(0);
  want.Str("kv_cache_spec_kind");
  want.Str("full_attention");
  want.Str("locality");
  want.Str("LOCAL");
  want.MapHeader(4);
  want.Str("type");
  want.Str("BlockRemoved");
  want.Str("block_hashes");
  want.ArrayHeader(1);
  want.Uint(7);
  want.Str("medium");
  want.Str("STORAGE");
  want.Str("locality");
  want.Str("REMOTE");
  want.Int(0);
  EXPECT_EQ(EncodeEventBatch(batch, 0, EventEncoding::kMap), want.bytes());
}

TEST(EventEncoderTest, ArrayEncodingPadsUnsetFieldsBeforeTheLastSetOne) {
  KvEventBatch batch{0, 1.0, "m", {}};
  KvEvent e = Stored({7});
  e.locality = "LOCAL";
  batch.events.push_back(e);
  KvEvent removed;
  removed.kind = KvEventKind::kBlockRemoved;
  removed.block_hashes = {7};
  removed.medium = "STORAGE";
  removed.locality = "REMOTE";
  batch.events.push_back(removed);

  Want want;
  want.ArrayHeader(3);
  want.Double(1.0);
  want.ArrayHeader(2);
  want.ArrayHeader(13);
  want.Str("BlockStored");
  want.ArrayHeader(1);
  want.Uint(7);
  want.Nil();           // parent_block_hash
  want.ArrayHeader(0);  // token_ids
  want.Uint(16);        // block_size
  want.Nil();           // lora_id
  want.Str("CPU");      // medium
  want.Nil();           // lora_name
  want.Nil();           // extra_keys
  want.Nil();           // group_idx
  want.Nil();           // kv_cache_spec_kind
  want.Nil();           // kv_cache_spec_sliding_window
  want.Str("LOCAL");    // locality
  want.ArrayHeader(5);
  want.Str("BlockRemoved");
  want.ArrayHeader(1);
  want.Uint(7);
  want.Str("STORAGE");  // medium
  want.Nil();           // group_idx
  want.Str("REMOTE");   // locality
  want.Int(0);
  EXPECT_EQ(EncodeEventBatch(batch, 0, EventEncoding::kArray), want.bytes());
}

TEST(EventEncoderTest, ParseEncoding) {
  EXPECT_EQ(*ParseEventEncoding("array"), EventEncoding::kArray);
  EXPECT_EQ(*ParseEventEncoding("map"), EventEncoding::kMap);
  absl::StatusOr<EventEncoding> bad = ParseEventEncoding("json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("json"), std::string::npos);
}

}  // namespace
}  // namespace kvstrata
