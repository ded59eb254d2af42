#include "daemon/session/tenant_table.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace kvstrata {
namespace {

std::string WriteToken(const std::string& name, const std::string& text) {
  std::string path =
      ::testing::TempDir() + "/kvstrata_tenant_" + name + "." + std::to_string(getpid()) + ".token";
  std::ofstream(path) << text;
  return path;
}

TEST(TenantTableTest, SingleTenantAdmitsEveryoneAsTheDefaultAdmin) {
  absl::StatusOr<TenantTable> table = TenantTable::Create({}, "");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_FALSE(table->multi_tenant());
  std::optional<Caller> peer = table->ForPeer(1234, 1234);
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->tenant, kDefaultTenant);
  EXPECT_TRUE(peer->admin && peer->shared_memory);
  EXPECT_EQ(peer->namespace_scope, "");          // fingerprints as before tenants existed
  EXPECT_TRUE(table->ForToken("").has_value());  // TLS-only TCP: as before
}

TEST(TenantTableTest, PeersMapByUidFirstThenGid) {
  TenantConfig a{"team-a", {1001}, {}, "", false, true};
  TenantConfig b{"team-b", {}, {2000}, "", false, false};
  TenantConfig ops{"ops", {0}, {}, "", true, false};
  absl::StatusOr<TenantTable> table = TenantTable::Create({a, b, ops}, "");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(table->multi_tenant());
  EXPECT_EQ(table->ForPeer(1001, 2000)->tenant, 1u);  // the uid wins over b's gid
  EXPECT_EQ(table->ForPeer(1001, 2000)->namespace_scope, "team-a");
  EXPECT_TRUE(table->ForPeer(1001, 5)->shared_memory);
  EXPECT_EQ(table->ForPeer(1500, 2000)->tenant, 2u);
  EXPECT_FALSE(table->ForPeer(1500, 2000)->shared_memory);
  EXPECT_FALSE(table->ForPeer(1500, 2000)->admin);
  EXPECT_EQ(table->ForPeer(0, 0)->tenant, 3u);
  EXPECT_TRUE(table->ForPeer(0, 0)->admin);
  EXPECT_FALSE(table->ForPeer(1500, 1500).has_value());  // nobody's: refused
  EXPECT_FALSE(table->ForToken("").has_value());         // no tokens: TCP refused
  EXPECT_EQ(table->Name(2), "team-b");
  EXPECT_EQ(table->Name(kDefaultTenant), "default");
  ASSERT_EQ(table->Tenants().size(), 3u);
  EXPECT_EQ(table->Tenants()[2].namespace_scope, "ops");
}

TEST(TenantTableTest, TenantsWithAnL1ShareGetPartitionsInOrder) {
  TenantConfig a{"a", {1}, {}, "", false, false, 0};
  TenantConfig b{"b", {2}, {}, "", false, false, 8 << 20};
  TenantConfig c{"c", {3}, {}, "", false, true, 0};
  TenantConfig d{"d", {4}, {}, "", false, false, 4 << 20};
  absl::StatusOr<TenantTable> table = TenantTable::Create({a, b, c, d}, "");
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->L1Shares(), (std::vector<uint64_t>{8 << 20, 4 << 20}));
  EXPECT_EQ(table->ForPeer(1, 1)->partition, 0u);
  EXPECT_EQ(table->ForPeer(2, 2)->partition, 1u);
  EXPECT_EQ(table->ForPeer(4, 4)->partition, 2u);
  EXPECT_EQ(MappedPartition(*table->ForPeer(1, 1)), std::nullopt);  // neither: no host mode
  EXPECT_EQ(MappedPartition(*table->ForPeer(2, 2)), 1u);
  EXPECT_EQ(MappedPartition(*table->ForPeer(3, 3)), 0u);  // shared_memory: partition 0
}

TEST(TenantTableTest, TokensMapToTheirTenant) {
  TenantConfig a{"team-a", {}, {}, WriteToken("a", "token-a\n"), false, false};
  absl::StatusOr<TenantTable> table = TenantTable::Create({a}, WriteToken("admin", "root-token"));
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->ForToken("token-a")->tenant, 1u);
  EXPECT_FALSE(table->ForToken("token-a")->admin);
  EXPECT_EQ(table->ForToken("root-token")->tenant, kDefaultTenant);
  EXPECT_TRUE(table->ForToken("root-token")->admin);
  EXPECT_EQ(table->ForToken("root-token")->namespace_scope, "default");
  EXPECT_FALSE(table->ForToken("token-b").has_value());
  EXPECT_FALSE(table->ForToken("token-").has_value());
  EXPECT_FALSE(table->ForToken("").has_value());
}

TEST(TenantTableTest, BadTokenFilesAreRefused) {
  TenantConfig missing{"a", {}, {}, "/nonexistent/token", false, false};
  absl::StatusOr<TenantTable> table = TenantTable::Create({missing}, "");
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("tenants[0].token_file"), std::string::npos);
  TenantConfig empty{"a", {}, {}, WriteToken("empty", " \n"), false, false};
  EXPECT_FALSE(TenantTable::Create({empty}, "").ok());
  std::string shared = WriteToken("shared", "same");
  TenantConfig x{"x", {}, {}, shared, false, false};
  TenantConfig y{"y", {}, {}, shared, false, false};
  table = TenantTable::Create({x, y}, "");
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("tenants[1].token_file"), std::string::npos);
}

TEST(TenantTableTest, ConnectionsAreIdentifiedByTheirPeerCredentials) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  TenantConfig me{"me", {static_cast<uint32_t>(getuid())}, {}, "", false, false};
  absl::StatusOr<TenantTable> table = TenantTable::Create({me}, "");
  ASSERT_TRUE(table.ok());
  absl::StatusOr<Caller> caller = table->ForConnection(pair[0]);
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->namespace_scope, "me");
  TenantConfig other{"other", {getuid() + 1}, {getgid() + 1}, "", false, false};
  table = TenantTable::Create({other}, "");
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->ForConnection(pair[0]).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(table->ForConnection(-1).status().code(), absl::StatusCode::kPermissionDenied);
  close(pair[0]);
  close(pair[1]);
}

}  // namespace
}  // namespace kvstrata
