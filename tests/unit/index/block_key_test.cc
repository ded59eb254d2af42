#include "daemon/index/block_key.h"

#include <string>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"

namespace kvstrata {
namespace {

TEST(BlockKeyTest, StoresNamespaceAndBytesInline) {
  absl::StatusOr<BlockKey> key = BlockKey::Make(7, "abc");
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->ns(), 7u);
  EXPECT_EQ(key->bytes(), "abc");
  EXPECT_LE(sizeof(BlockKey), 40u);
}

TEST(BlockKeyTest, RejectsEmptyAndTooLongKeys) {
  EXPECT_EQ(BlockKey::Make(1, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockKey::Make(1, std::string(33, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(BlockKey::Make(1, std::string(32, 'x')).ok());
}

TEST(BlockKeyTest, EqualityAndHashSeparateNamespacesAndBytes) {
  BlockKey a = *BlockKey::Make(1, "k");
  BlockKey b = *BlockKey::Make(2, "k");
  BlockKey c = *BlockKey::Make(1, "k");
  BlockKey d = *BlockKey::Make(1, std::string_view("k\0", 2));
  EXPECT_EQ(a, c);
  EXPECT_NE(a, b);
  EXPECT_NE(a, d);
  EXPECT_EQ(absl::Hash<BlockKey>()(a), absl::Hash<BlockKey>()(c));
  EXPECT_NE(a.Fingerprint(), b.Fingerprint());
}

TEST(BlockKeyTest, MakeBlockKeysNamesTheBadPosition) {
  std::vector<std::string_view> raw = {"a", "", "c"};
  absl::StatusOr<std::vector<BlockKey>> keys = MakeBlockKeys(1, raw, 10);
  ASSERT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(keys.status().message().find("key 1"), std::string_view::npos);
  EXPECT_EQ(MakeBlockKeys(1, raw, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvstrata
