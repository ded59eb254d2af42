// The tier factory (daemon/tiers/tier_factory.h): the kinds registered, the descriptors
// and the table it makes from the configuration's [[tiers]] list, and its refusals. What
// every tier it builds keeps is the contract suite's (block_tier_contract_test.cc, over
// every kind in kRegisteredKinds).
#include "daemon/tiers/tier_factory.h"

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "daemon/config/config_loader.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/block_tier_factories.h"

namespace kvstrata {
namespace {

TEST(TierFactoryTest, TheContractSuiteCoversEveryRegisteredKind) {
  std::vector<std::string_view> suite(tier_contract::kRegisteredKinds.begin(),
                                      tier_contract::kRegisteredKinds.end());
  EXPECT_EQ(TierKindNames(), suite)
      << "a kind registered in tier_factory.cc needs its KindFactory in "
         "tests/unit/tiers/block_tier_factories.h";
}

TEST(TierFactoryTest, TheDefaultConfigurationBuildsTheStandardTable) {
  absl::StatusOr<Config> config = LoadConfig("", {"l3.enabled=true", "l3.path=/mnt/l3"});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<TierTable> table = BuildTierTable(config->tiers);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->all(), TierTable::Standard().all());
  // Off, a tier keeps its row (and id): `kvstrata tiers` lists it "disabled".
  absl::StatusOr<Config> plain = LoadConfig("", {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<TierTable> off = BuildTierTable(plain->tiers);
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_EQ(off->size(), 3u);
  EXPECT_FALSE(off->Of(Tier::kL3).enabled);
  EXPECT_EQ(off->Of(Tier::kL3).label, "l3");
}

TEST(TierFactoryTest, AListGivesIdsInItsOrderAndEachKindItsPlace) {
  std::vector<LowerTierConfig> list(3);
  list[0].name = "shared", list[0].kind = "shared-file";
  list[1].name = "nvme", list[1].kind = "local-file";
  list[2].name = "hdd", list[2].kind = "local-file";
  absl::StatusOr<TierTable> table = BuildTierTable(list);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->size(), 4u);
  EXPECT_EQ(table->Of(Tier::kL1).label, "l1");
  const TierDescriptor& shared = table->Of(TierAt(1));
  EXPECT_EQ(shared.label, "shared");
  EXPECT_TRUE(shared.shared);
  EXPECT_EQ(shared.medium, "STORAGE");
  EXPECT_EQ(shared.locality, "REMOTE");
  const TierDescriptor& hdd = table->Of(TierAt(3));
  EXPECT_EQ(hdd.label, "hdd");
  EXPECT_FALSE(hdd.shared);
  EXPECT_EQ(hdd.locality, "LOCAL");
  EXPECT_EQ(table->Find("nvme")->id, TierAt(2));
  EXPECT_EQ(table->Find("tape"), nullptr);
  EXPECT_EQ(table->RouteName(TierAt(3), CopyDirection::kDown), "l1_to_hdd");
  EXPECT_EQ(table->RouteName(TierAt(3), CopyDirection::kUp), "hdd_to_l1");
  EXPECT_EQ(table->RouteName(Tier::kL1, CopyDirection::kDown), "gpu_to_l1");
  EXPECT_EQ(TierWire(TierAt(3)), 4);
  EXPECT_EQ(TierFromWire(4), TierAt(3));
}

TEST(TierFactoryTest, AnUnknownKindIsRefused) {
  LowerTierConfig entry;
  entry.name = "cold";
  entry.kind = "tape";
  absl::StatusOr<TierDescriptor> d = DescribeTier(entry);
  ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.status().message(), "tier 'cold': unknown kind 'tape' (local-file, shared-file, object)");
  EXPECT_EQ(MakeTier(entry, TierDescriptor{}, TierContext{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildTierTable({entry}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TierFactoryTest, ATierWhoseDirectoryCannotBeUsedIsAnError) {
  char tmpl[] = "/tmp/kvs-factory-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  const std::string file = dir + "/a-file";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  for (std::string_view kind : {"local-file", "shared-file"}) {  // the kinds of a directory
    LowerTierConfig entry = tier_contract::ContractEntry(kind, file);  // a file, not a directory
    absl::StatusOr<TierDescriptor> d = DescribeTier(entry);
    ASSERT_TRUE(d.ok());
    d->id = TierAt(1);
    EXPECT_EQ(MakeTier(entry, *d, TierContext{}).status().code(),
              absl::StatusCode::kFailedPrecondition)
        << kind;
  }
  std::filesystem::remove_all(dir);
}

TEST(TierFactoryTest, ABuiltTierIsItsDescriptorsAndAnnouncesByNamespaceId) {
  char tmpl[] = "/tmp/kvs-factory-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  LowerTierConfig entry = tier_contract::ContractEntry("shared-file", dir);
  entry.name = "team";
  absl::StatusOr<TierDescriptor> d = DescribeTier(entry);
  ASSERT_TRUE(d.ok());
  d->id = TierAt(2);
  std::vector<NamespaceId> heard;
  TierContext context;
  context.observer = [&](NamespaceId ns, absl::string_view, bool stored, RemovalCause) {
    if (stored) heard.push_back(ns);
  };
  {
    auto tier = MakeTier(entry, *d, context);
    ASSERT_TRUE(tier.ok()) << tier.status();
    EXPECT_EQ((*tier)->level(), TierAt(2));
    EXPECT_EQ((*tier)->label(), "team");
    EXPECT_TRUE((*tier)->shared());
    TierNamespace ns = tier_contract::MakeNamespace("factory");
    ASSERT_TRUE((*tier)->Write(ns, "k", std::string(ns.payload_bytes, 'x')).ok());
  }
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_NE(heard[0], 0u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvstrata
