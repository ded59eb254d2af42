// The tenants of this daemon and how a connection is mapped to one (docs/security.md).
//
// Without [[tenants]] in the config the daemon is single-tenant: every Unix-socket peer,
// and every TCP caller with the server's token, is the default tenant with admin rights
// (the socket's file permissions are the access control). With tenants, a Unix-socket peer
// is the first tenant listing its uid (SO_PEERCRED) or else its gid; a TCP caller is the
// tenant whose token it presents (server.auth_token_file stays an admin token); anyone
// else is refused. Immutable after Create; thread-safe.
#ifndef KVSTRATA_DAEMON_SESSION_TENANT_TABLE_H_
#define KVSTRATA_DAEMON_SESSION_TENANT_TABLE_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config/config.h"
#include "daemon/session/caller.h"

namespace kvstrata {

class TenantTable {
 public:
  // Reads every token file. INVALID_ARGUMENT naming the key for a missing or empty token
  // file, or a token that two identities share.
  static absl::StatusOr<TenantTable> Create(const std::vector<TenantConfig>& tenants,
                                            const std::string& admin_token_file);

  bool multi_tenant() const { return !tenants_.empty(); }

  // The caller behind a Unix-socket peer; nullopt when no tenant claims it.
  std::optional<Caller> ForPeer(uid_t uid, gid_t gid) const;
  // The caller presenting `token` on TCP; nullopt for an unknown token. With no tokens
  // configured at all (TLS-only TCP) every TCP caller is the default tenant of a
  // single-tenant daemon, and refused by a multi-tenant one.
  std::optional<Caller> ForToken(std::string_view token) const;
  // The caller on a connected Unix socket (SO_PEERCRED); PERMISSION_DENIED naming the uid
  // and gid when no tenant claims it. Does not block.
  absl::StatusOr<Caller> ForConnection(int fd) const;

  // The configured tenants, in TenantId order (1, 2, ...); empty when single-tenant.
  const std::vector<Caller>& Tenants() const { return callers_; }
  // The L1 partitions of the tenants with an l1_capacity, in partition order (1, 2, ...).
  std::vector<uint64_t> L1Shares() const;
  // "default" for the default tenant.
  std::string Name(TenantId tenant) const;

 private:
  struct Token {
    std::string token;
    Caller caller;
  };
  Caller DefaultCaller() const;

  std::vector<TenantConfig> tenants_;  // tenant id = index + 1
  std::vector<Caller> callers_;        // tenants_[i]'s caller at i
  std::vector<Token> tokens_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SESSION_TENANT_TABLE_H_
