#include "daemon/namespaces/namespace_registry.h"

#include <gtest/gtest.h>

#include "tests/unit/namespaces/test_specs.h"

namespace kvstrata {
namespace {

TEST(NamespaceRegistryTest, SameSpecSameIdAcrossSessions) {
  NamespaceRegistry registry;
  auto a = registry.Register(1, Llama8bSpec());
  auto b = registry.Register(2, Llama8bSpec());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->id, b->id);
  EXPECT_EQ(a->fingerprint, b->fingerprint);
  EXPECT_EQ(b->sessions, 2u);
  EXPECT_EQ(registry.size(), 1u);
  EXPECT_TRUE(registry.IsRegisteredBy(a->id, 1));
  EXPECT_FALSE(registry.IsRegisteredBy(a->id, 3));
}

TEST(NamespaceRegistryTest, DifferentSpecsGetDifferentIds) {
  NamespaceRegistry registry;
  NamespaceSpec other = Llama8bSpec();
  other.tp_size = 2;
  other.tp_rank = 1;
  auto a = registry.Register(1, Llama8bSpec());
  auto b = registry.Register(1, other);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->id, b->id);
  EXPECT_EQ(registry.FindByFingerprint(b->fingerprint)->id, b->id);
  EXPECT_EQ(registry.List().size(), 2u);
}

TEST(NamespaceRegistryTest, ReleasingASessionKeepsTheNamespace) {
  NamespaceRegistry registry;
  auto a = registry.Register(1, Llama8bSpec());
  registry.ReleaseSession(1);
  ASSERT_TRUE(registry.Find(a->id).has_value());
  EXPECT_EQ(registry.Find(a->id)->sessions, 0u);
  EXPECT_FALSE(registry.IsRegisteredBy(a->id, 1));
}

TEST(NamespaceRegistryTest, UnknownIdsAreMisses) {
  NamespaceRegistry registry;
  EXPECT_FALSE(registry.Find(0).has_value());
  EXPECT_FALSE(registry.Find(7).has_value());
  EXPECT_FALSE(registry.FindByFingerprint("00").has_value());
}

TEST(NamespaceRegistryTest, LimitIsResourceExhausted) {
  NamespaceRegistry registry(1);
  ASSERT_TRUE(registry.Register(1, Llama8bSpec()).ok());
  NamespaceSpec other = Llama8bSpec();
  other.salt = "x";
  EXPECT_EQ(registry.Register(1, other).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(NamespaceRegistryTest, AFingerprintATierFoundFirstKeepsItsIdWhenRegistered) {
  NamespaceRegistry registry;
  NamespaceSpec spec = Llama8bSpec();
  ASSERT_TRUE(ValidateAndNormalize(spec).ok());
  const std::string fingerprint = Fingerprint(spec);
  const NamespaceId early = registry.IdOf(fingerprint);  // a tier's scan found its blocks
  ASSERT_NE(early, 0u);
  EXPECT_EQ(registry.IdOf(fingerprint), early);
  // Not registered yet: not listed, not found, not counted.
  EXPECT_FALSE(registry.Find(early).has_value());
  EXPECT_FALSE(registry.FindByFingerprint(fingerprint).has_value());
  EXPECT_TRUE(registry.List().empty());
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_FALSE(registry.IsRegisteredBy(early, 1));
  auto a = registry.Register(1, Llama8bSpec());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->id, early);
  EXPECT_EQ(a->bytes_per_block, BytesPerBlock(Llama8bSpec()));
  ASSERT_TRUE(registry.Find(early).has_value());
  EXPECT_EQ(registry.Find(early)->fingerprint, fingerprint);
  EXPECT_EQ(registry.size(), 1u);
  EXPECT_EQ(registry.IdOf(fingerprint), early);
  // Another namespace registered afterwards takes the next id.
  NamespaceSpec other = Llama8bSpec();
  other.salt = "x";
  EXPECT_EQ(registry.Register(1, other)->id, early + 1);
}

TEST(NamespaceRegistryTest, IdsForTiersCountTowardTheLimit) {
  NamespaceRegistry registry(1);
  ASSERT_NE(registry.IdOf("00000000000000000000000000000001"), 0u);
  EXPECT_EQ(registry.IdOf("00000000000000000000000000000002"), 0u);  // full
  EXPECT_EQ(registry.Register(1, Llama8bSpec()).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(NamespaceRegistryTest, InvalidSpecIsRejected) {
  NamespaceRegistry registry;
  NamespaceSpec bad = Llama8bSpec();
  bad.num_layers = 0;
  EXPECT_EQ(registry.Register(1, bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.size(), 0u);
}

}  // namespace
}  // namespace kvstrata
