// The object kind in the BlockTier suites (block_tier_factories.h): each factory builds its
// tier as the daemon does -- a configuration file with an `object` [[tiers]] entry through
// LoadConfig, then MakeTier -- on the test binary's SeaweedFS (s3_test_server.h), under a
// prefix of its own. Without a SeaweedFS binary SkipReason() says why and the suites skip
// (or fail: SkipIsFailure(), where $KVSTRATA_REQUIRE_WEED=1).
#ifndef KVSTRATA_TESTS_UNIT_TIERS_OBJECT_OBJECT_TIER_FACTORY_H_
#define KVSTRATA_TESTS_UNIT_TIERS_OBJECT_OBJECT_TIER_FACTORY_H_

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/config/config_loader.h"
#include "daemon/tiers/tier_factory.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/object/s3_test_server.h"

namespace kvstrata {

// A fresh prefix per call: tests on one bucket see none of each other's objects.
inline std::string FreshObjectPrefix() {
  static std::atomic<int> next{0};
  return absl::StrCat("t", ::getpid(), "-", next++);
}

// The credentials file the test tiers name (the server's identity, or `secret`).
inline std::string WriteTestCredentials(const std::string& secret = S3TestServer::kSecretKey) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/kvs-s3-credentials.", ::getpid(),
                                        ".", FreshObjectPrefix());
  std::ofstream(path) << "[default]\naws_access_key_id = " << S3TestServer::kAccessKey
                      << "\naws_secret_access_key = " << secret << "\n";
  return path;
}

// The configuration of one object tier labelled `label` with `extra` keys (TOML lines).
// On `server` (the shared one unless a test runs its own).
inline absl::StatusOr<Config> ObjectTierConfig(
    const std::string& label, const std::string& prefix, const std::string& credentials,
    const std::string& extra = "", const S3TestServer& server = S3TestServer::Shared()) {
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/kvs-object.", ::getpid(), ".", prefix, ".toml");
  std::ofstream(path) << "[[tiers]]\nlabel = \"" << label << "\"\nkind = \"object\"\n"
                      << "endpoint = \"" << server.endpoint() << "\"\n"
                      << "bucket = \"" << S3TestServer::kBucket << "\"\nprefix = \"" << prefix
                      << "\"\ncredentials_file = \"" << credentials << "\"\n"
                      << (absl::StrContains(extra, "capacity") ? "" : "capacity = \"64MiB\"\n")
                      << extra;
  return LoadConfig(path, {});
}

inline absl::StatusOr<std::unique_ptr<BlockTier>> MakeObjectTestTier(
    const std::string& prefix, const std::string& extra = "",
    const std::string& secret = S3TestServer::kSecretKey, const TierContext& context = {},
    const S3TestServer& server = S3TestServer::Shared()) {
  absl::StatusOr<Config> config =
      ObjectTierConfig("obj", prefix, WriteTestCredentials(secret), extra, server);
  if (!config.ok()) return config.status();
  absl::StatusOr<TierDescriptor> d = DescribeTier(config->tiers[0]);
  if (!d.ok()) return d.status();
  d->id = Tier::kL2;
  return MakeTier(config->tiers[0], *d, context);
}

class ObjectTierFactory {
 public:
  ObjectTierFactory() {
    if (!S3TestServer::Shared().available()) return;
    auto made = MakeObjectTestTier(FreshObjectPrefix());
    EXPECT_TRUE(made.ok()) << made.status();
    if (made.ok()) tier_ = *std::move(made);
  }
  std::string SkipReason() const {
    return S3TestServer::Shared().available() ? "" : S3TestServer::Shared().why();
  }
  static bool SkipIsFailure() { return S3TestServer::Required(); }
  BlockTier& Get() { return *tier_; }

 private:
  std::unique_ptr<BlockTier> tier_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_TIERS_OBJECT_OBJECT_TIER_FACTORY_H_
