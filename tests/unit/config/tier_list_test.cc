// The [[tiers]] list (issue 45): an ordered list of tiers below L1, each of a kind, with
// [<label>] sections and --set=<label>.key as aliases of an entry's keys ([l2], [l3] as
// before the list), and one test per class of bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "daemon/config/config_loader.h"
#include "tests/unit/config/config_test_util.h"

namespace kvstrata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

absl::StatusOr<Config> Load(const std::string& file, const std::vector<std::string>& set = {}) {
  return LoadConfig(file.empty() ? "" : WriteTempConfig("kvstrata_tier_list_test", file), set);
}

std::string Error(const std::string& file, const std::vector<std::string>& set = {}) {
  absl::StatusOr<Config> config = Load(file, set);
  EXPECT_FALSE(config.ok()) << file;
  return config.ok() ? "" : std::string(config.status().message());
}

const char kTwoTiers[] = R"(
[[tiers]]
label = "nvme"
kind = "local-file"
path = "/srv/nvme"
capacity = "8GiB"

[[tiers]]
label = "shared"
kind = "shared-file"
path = "/mnt/shared"
probe_timeout_ms = 20
)";

TEST(TierListTest, TheDefaultIsL2ThenL3InThatOrder) {
  absl::StatusOr<Config> config = LoadConfig("", {});
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->tiers.size(), 2u);
  EXPECT_EQ(config->tiers[0].name, "l2");
  EXPECT_EQ(config->tiers[0].kind, "local-file");
  EXPECT_TRUE(config->tiers[0].enabled);
  EXPECT_EQ(config->tiers[1].name, "l3");
  EXPECT_EQ(config->tiers[1].kind, "shared-file");
  EXPECT_FALSE(config->tiers[1].enabled);
}

TEST(TierListTest, PrintDefaultConfigShowsTheListAndEachKindsKeys) {
  const std::string text(DefaultConfigToml());
  EXPECT_THAT(
      text, AllOf(HasSubstr("[[tiers]]\nlabel = \"l2\"\nkind = \"local-file\""),
                  HasSubstr("[[tiers]]\nlabel = \"l3\"\nkind = \"shared-file\""),
                  HasSubstr("[tier_kinds.local-file]\n"), HasSubstr("[tier_kinds.shared-file]\n")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("\n[l2]")));
}

TEST(TierListTest, AFileListReplacesTheDefaultAndTakesItsKindsDefaults) {
  absl::StatusOr<Config> config = Load(kTwoTiers);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->tiers.size(), 2u);
  const LowerTierConfig& nvme = config->tiers[0];
  EXPECT_EQ(nvme.name, "nvme");
  EXPECT_TRUE(nvme.enabled);  // an entry of a file is on unless it says not
  EXPECT_EQ(nvme.path, "/srv/nvme");
  EXPECT_EQ(nvme.capacity_bytes, 8ULL << 30);
  EXPECT_EQ(nvme.fsync, "none");  // local-file's default
  const LowerTierConfig& shared = config->tiers[1];
  EXPECT_EQ(shared.kind, "shared-file");
  EXPECT_EQ(shared.probe_timeout_ms, 20);
  EXPECT_EQ(shared.fsync, "file");              // shared-file's default
  EXPECT_EQ(shared.negative_cache_ms, 100);     // a shared-file key
  EXPECT_EQ(FindTier(*config, "l2"), nullptr);  // the default list is gone
  // `kvstrata config` lists each tier's keys under its label.
  auto source_of = [&](const std::string& key) {
    const ConfigEntry* e = FindEntry(*config, key);
    return e == nullptr ? std::string("absent") : e->source;
  };
  EXPECT_EQ(source_of("nvme.capacity"), "file");
  EXPECT_EQ(source_of("nvme.fsync"), "default");
  EXPECT_EQ(source_of("shared.kind"), "file");
  EXPECT_EQ(source_of("l2.capacity"), "absent");
  EXPECT_THAT(config->effective_toml, HasSubstr("label = 'shared'"));
}

TEST(TierListTest, LabelSectionsAndSetFlagsAreAliasesOfAnEntry) {
  const std::string file = std::string(kTwoTiers) + "\n[nvme]\nio_threads = 8\n";
  absl::StatusOr<Config> config = Load(file, {"shared.enabled=false", "nvme.capacity=16GiB"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(FindTier(*config, "nvme")->io_threads, 8);
  EXPECT_EQ(FindTier(*config, "nvme")->capacity_bytes, 16ULL << 30);
  EXPECT_FALSE(FindTier(*config, "shared")->enabled);
  // [l2] / [l3] and --set=l3.* keep working on the default list.
  absl::StatusOr<Config> old =
      Load("[l2]\ncapacity = \"2GiB\"\n", {"l3.enabled=true", "l3.path=/mnt/l3"});
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(FindTier(*old, "l2")->capacity_bytes, 2ULL << 30);
  EXPECT_TRUE(FindTier(*old, "l3")->enabled);
}

TEST(TierListTest, TheRenamedKeyIsReadInAnyTier) {
  absl::StatusOr<Config> config =
      Load(std::string(kTwoTiers) + "\n[nvme]\nadmission_threshold = 2\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(FindTier(*config, "nvme")->write_down_min_hits, 2);
  ASSERT_EQ(config->warnings.size(), 1u);
  EXPECT_THAT(config->warnings[0], HasSubstr("'nvme.admission_threshold' is deprecated"));
}

TEST(TierListTest, AnEmptyListMeansNoLowerTier) {
  absl::StatusOr<Config> config = Load("tiers = []\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->tiers.empty());
}

// One test per class of bad input; each error names the key.
TEST(TierListBadInputTest, NotAListOfTables) {
  EXPECT_THAT(Error("tiers = 3\n"), HasSubstr("config key 'tiers': got the integer 3"));
  EXPECT_THAT(Error("[tiers]\nlabel = \"x\"\n"), HasSubstr("expected [[tiers]] tables"));
}

TEST(TierListBadInputTest, AMissingOrUnknownKind) {
  EXPECT_THAT(Error("[[tiers]]\nlabel = \"a\"\npath = \"/a\"\n"),
              AllOf(HasSubstr("'tiers[0].kind': missing"), HasSubstr("\"local-file\"")));
  EXPECT_THAT(
      Error("[[tiers]]\nlabel = \"a\"\nkind = \"tape\"\n"),
      AllOf(HasSubstr("'tiers[0].kind': got the string \"tape\""), HasSubstr("\"shared-file\"")));
}

TEST(TierListBadInputTest, AMissingOrMalformedLabel) {
  EXPECT_THAT(Error("[[tiers]]\nkind = \"local-file\"\n"), HasSubstr("'tiers[0].label': missing"));
  EXPECT_THAT(Error("[[tiers]]\nlabel = 7\nkind = \"local-file\"\n"),
              HasSubstr("'tiers[0].label': got the integer 7"));
  for (const char* bad : {"NVMe", "", "-x", "a b", "abcdefghijklmnopqrstuvwxyz0123456"}) {
    EXPECT_THAT(Error(std::string("[[tiers]]\nlabel = \"") + bad +
                      "\"\nkind = \"local-file\"\npath = \"/a\"\n"),
                HasSubstr("is not a tier label"))
        << bad;
  }
}

TEST(TierListBadInputTest, ALabelThatNamesASection) {
  for (const char* taken : {"l1", "server", "gpu", "tenants"}) {
    EXPECT_THAT(Error(std::string("[[tiers]]\nlabel = \"") + taken +
                      "\"\nkind = \"local-file\"\npath = \"/a\"\n"),
                HasSubstr("is the name of a section"))
        << taken;
  }
}

TEST(TierListBadInputTest, ADuplicateLabel) {
  EXPECT_THAT(Error("[[tiers]]\nlabel = \"a\"\nkind = \"local-file\"\npath = \"/a\"\n"
                    "[[tiers]]\nlabel = \"a\"\nkind = \"shared-file\"\npath = \"/b\"\n"),
              HasSubstr("'tiers[1].label': 'a' is used by another tier"));
}

TEST(TierListBadInputTest, TwoTiersInOneDirectory) {
  const std::string same =
      "[[tiers]]\nlabel = \"a\"\nkind = \"local-file\"\npath = \"/x/y\"\n"
      "[[tiers]]\nlabel = \"b\"\nkind = \"shared-file\"\npath = \"/x/y/\"\n";
  EXPECT_THAT(Error(same), HasSubstr("config key 'b.path': '/x/y/' overlaps a.path"));
  const std::string inside =
      "[[tiers]]\nlabel = \"a\"\nkind = \"local-file\"\npath = \"/x\"\n"
      "[[tiers]]\nlabel = \"b\"\nkind = \"local-file\"\npath = \"/x/b\"\n";
  EXPECT_THAT(Error(inside), HasSubstr("'b.path': '/x/b' overlaps a.path"));
  // Apart, or one of them off: fine.
  EXPECT_TRUE(Load("[[tiers]]\nlabel = \"a\"\nkind = \"local-file\"\npath = \"/x\"\n"
                   "[[tiers]]\nlabel = \"b\"\nkind = \"local-file\"\npath = \"/xb\"\n")
                  .ok());
  EXPECT_TRUE(Load(same + "enabled = false\n").ok());
}

TEST(TierListBadInputTest, TooManyTiers) {
  std::string file;
  for (int i = 0; i < 8; ++i) {
    file += "[[tiers]]\nlabel = \"t" + std::to_string(i) +
            "\"\nkind = \"local-file\"\npath = \"/t" + std::to_string(i) + "\"\n";
  }
  EXPECT_THAT(Error(file), HasSubstr("8 tiers: expected at most 7 below L1"));
}

TEST(TierListBadInputTest, AKeyTheKindDoesNotHave) {
  EXPECT_THAT(Error("[[tiers]]\nlabel = \"a\"\nkind = \"local-file\"\npath = \"/a\"\n"
                    "negative_cache_ms = 5\n"),
              HasSubstr("unknown key 'a.negative_cache_ms'"));
  EXPECT_THAT(Error("", {"l2.presence_check=sync"}), HasSubstr("unknown key 'l2.presence_check'"));
}

TEST(TierListBadInputTest, ASectionOrFlagForALabelNoTierHas) {
  EXPECT_THAT(Error(std::string(kTwoTiers) + "\n[l2]\ncapacity = \"1GiB\"\n"),
              AllOf(HasSubstr("unknown section 'l2'"), HasSubstr("nvme, shared")));
  EXPECT_THAT(Error(kTwoTiers, {"l3.enabled=true"}), HasSubstr("unknown key 'l3.enabled'"));
}

TEST(TierListBadInputTest, TheKindsDefaultsAreNotASection) {
  EXPECT_THAT(Error("[tier_kinds.local-file]\nio_threads = 8\n"),
              HasSubstr("unknown section 'tier_kinds'"));
  EXPECT_THAT(Error("[[tiers]]\nlabel = \"tier_kinds\"\nkind = \"local-file\"\npath = \"/a\"\n"),
              HasSubstr("is the name of a section"));
}

TEST(TierListBadInputTest, AnAliasCannotChangeALabelOrKind) {
  EXPECT_THAT(Error("[l2]\nlabel = \"fast\"\n"),
              HasSubstr("'l2.label': a tier's label is set in its [[tiers]] entry only"));
  EXPECT_THAT(Error("", {"l3.kind=local-file"}),
              HasSubstr("l3.kind: a tier's kind is set in its [[tiers]] entry only"));
}

TEST(TierListBadInputTest, AnEnabledSharedTierWithoutAPath) {
  EXPECT_THAT(Error("[[tiers]]\nlabel = \"s\"\nkind = \"shared-file\"\n"),
              HasSubstr("config key 's.path': is empty"));
  // One error, not also an overlap with the other tier's directory.
  EXPECT_THAT(Error("", {"l3.enabled=true"}), AllOf(HasSubstr("config key 'l3.path': is empty"),
                                                    ::testing::Not(HasSubstr("overlaps"))));
}

TEST(TierListBadInputTest, AValueOfTheWrongTypeInAnEntry) {
  EXPECT_THAT(Error("[[tiers]]\nlabel = \"a\"\nkind = \"local-file\"\npath = \"/a\"\n"
                    "io_threads = \"many\"\n"),
              HasSubstr("config key 'a.io_threads': got the string \"many\": expected an integer"));
  absl::StatusOr<Config> bytes =
      Load("[[tiers]]\nlabel = \"a\"\nkind = \"local-file\"\npath = \"/a\"\ncapacity = 2097152\n");
  ASSERT_TRUE(bytes.ok()) << bytes.status();  // a bare number is bytes, for any label
  EXPECT_EQ(bytes->tiers[0].capacity_bytes, 2ULL << 20);
}

}  // namespace
}  // namespace kvstrata
