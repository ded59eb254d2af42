#include "daemon/namespaces/namespace_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "tests/unit/namespaces/test_specs.h"

namespace kvstrata {
namespace {

using ::testing::HasSubstr;

TEST(NamespaceSpecTest, BytesPerBlockFollowsGeometry) {
  NamespaceSpec spec = Llama8bSpec();
  ASSERT_TRUE(ValidateAndNormalize(spec).ok());
  EXPECT_EQ(BytesPerBlock(spec), 2ULL * 32 * 8 * 128 * 16 * 2);  // 2 MiB
  spec.attention_kind = AttentionKind::kMla;
  EXPECT_EQ(BytesPerBlock(spec), 1ULL * 32 * 8 * 128 * 16 * 2);
  spec.kv_layout = KvLayout::kOpaque;
  spec.opaque_block_bytes = 12345;
  EXPECT_EQ(BytesPerBlock(spec), 12345u);
}

TEST(NamespaceSpecTest, NormalizesDefaults) {
  NamespaceSpec spec = Llama8bSpec();
  spec.tp_size = 0;
  spec.pp_size = 0;
  ASSERT_TRUE(ValidateAndNormalize(spec).ok());
  EXPECT_EQ(spec.tp_size, 1u);
  EXPECT_EQ(spec.pp_size, 1u);
  EXPECT_EQ(spec.attention_kind, AttentionKind::kMha);
}

TEST(NamespaceSpecTest, FingerprintIsStableAndSensitiveToEveryField) {
  NamespaceSpec base = Llama8bSpec();
  ASSERT_TRUE(ValidateAndNormalize(base).ok());
  const std::string fingerprint = Fingerprint(base);
  EXPECT_EQ(fingerprint.size(), 32u);
  EXPECT_EQ(Fingerprint(base), fingerprint);
  std::vector<std::function<void(NamespaceSpec&)>> changes = {
      [](NamespaceSpec& s) { s.engine_kind = EngineKind::kSglang; },
      [](NamespaceSpec& s) { s.model = "other"; },
      [](NamespaceSpec& s) { s.dtype = DType::kFloat16; },
      [](NamespaceSpec& s) { s.num_layers = 16; },
      [](NamespaceSpec& s) { s.num_kv_heads = 4; },
      [](NamespaceSpec& s) { s.head_size = 64; },
      [](NamespaceSpec& s) { s.tokens_per_block = 32; },
      [](NamespaceSpec& s) { s.tp_size = 2, s.tp_rank = 1; },
      [](NamespaceSpec& s) { s.pp_size = 2, s.pp_rank = 1; },
      [](NamespaceSpec& s) { s.kv_layout = KvLayout::kVllmHnd; },
      [](NamespaceSpec& s) { s.attention_kind = AttentionKind::kMla; },
      [](NamespaceSpec& s) { s.salt = "tenant-a"; },
      [](NamespaceSpec& s) { s.kv_group = "1/2:sliding_window=128"; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    NamespaceSpec changed = base;
    changes[i](changed);
    EXPECT_NE(Fingerprint(changed), fingerprint) << "change " << i;
  }
}

// A fingerprint written before kv_group existed names the same directory today.
TEST(NamespaceSpecTest, AnEmptyKvGroupKeepsTheEarlierEncoding) {
  NamespaceSpec spec = Llama8bSpec();
  ASSERT_TRUE(ValidateAndNormalize(spec).ok());
  EXPECT_THAT(CanonicalEncoding(spec), ::testing::Not(HasSubstr("kv_group")));
  spec.kv_group = "0/2:full";
  EXPECT_THAT(CanonicalEncoding(spec), HasSubstr("|kv_group:8:0/2:full"));
}

// Two groups of one engine with the same geometry (e.g. Gemma 3's five sliding-window
// groups) differ only in kv_group: their blocks never match.
TEST(NamespaceSpecTest, GroupsOfOneEngineHaveTheirOwnFingerprints) {
  NamespaceSpec a = Llama8bSpec(), b = Llama8bSpec();
  a.kv_group = "1/6:sliding_window=1024";
  b.kv_group = "2/6:sliding_window=1024";
  ASSERT_TRUE(ValidateAndNormalize(a).ok());
  ASSERT_TRUE(ValidateAndNormalize(b).ok());
  EXPECT_NE(Fingerprint(a), Fingerprint(b));
}

TEST(NamespaceSpecTest, FieldBoundariesCannotCollide) {
  NamespaceSpec a = Llama8bSpec(), b = Llama8bSpec();
  a.model = "ab";
  a.salt = "c";
  b.model = "a";
  b.salt = "bc";
  EXPECT_NE(CanonicalEncoding(a), CanonicalEncoding(b));
}

class BadSpecTest
    : public ::testing::TestWithParam<std::pair<const char*, std::function<void(NamespaceSpec&)>>> {
};

TEST_P(BadSpecTest, IsInvalidArgumentNamingTheField) {
  NamespaceSpec spec = Llama8bSpec();
  GetParam().second(spec);
  absl::Status status = ValidateAndNormalize(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(GetParam().first));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadSpecTest,
    ::testing::Values(
        std::pair{"engine_kind",
                  [](NamespaceSpec& s) { s.engine_kind = EngineKind::kUnspecified; }},
        std::pair{"engine_kind",
                  [](NamespaceSpec& s) { s.engine_kind = static_cast<EngineKind>(99); }},
        std::pair{"model", [](NamespaceSpec& s) { s.model.clear(); }},
        std::pair{"model", [](NamespaceSpec& s) { s.model.assign(513, 'm'); }},
        std::pair{"dtype", [](NamespaceSpec& s) { s.dtype = DType::kUnspecified; }},
        std::pair{"num_layers", [](NamespaceSpec& s) { s.num_layers = 0; }},
        std::pair{"num_kv_heads", [](NamespaceSpec& s) { s.num_kv_heads = 5000; }},
        std::pair{"head_size", [](NamespaceSpec& s) { s.head_size = 0; }},
        std::pair{"tokens_per_block", [](NamespaceSpec& s) { s.tokens_per_block = 0; }},
        std::pair{"tp_rank", [](NamespaceSpec& s) { s.tp_size = 2, s.tp_rank = 2; }},
        std::pair{"pp_rank", [](NamespaceSpec& s) { s.pp_rank = 1; }},
        std::pair{"kv_layout", [](NamespaceSpec& s) { s.kv_layout = KvLayout::kUnspecified; }},
        std::pair{"attention_kind",
                  [](NamespaceSpec& s) { s.attention_kind = static_cast<AttentionKind>(7); }},
        std::pair{"salt", [](NamespaceSpec& s) { s.salt.assign(257, 's'); }},
        std::pair{"kv_group", [](NamespaceSpec& s) { s.kv_group.assign(129, 'g'); }},
        std::pair{"kv_group", [](NamespaceSpec& s) { s.kv_group = "0/2\nfull"; }},
        std::pair{"opaque_block_bytes", [](NamespaceSpec& s) { s.opaque_block_bytes = 5; }},
        std::pair{"opaque_block_bytes", [](NamespaceSpec& s) { s.kv_layout = KvLayout::kOpaque; }},
        std::pair{"1GiB", [](NamespaceSpec& s) { s.num_layers = 4096, s.num_kv_heads = 4096; }}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace kvstrata
