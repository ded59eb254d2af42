#include "daemon/session/tenant_table.h"

#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/common/secret_file.h"

namespace kvstrata {
namespace {

// Compares without returning early, so the time taken does not reveal a matching prefix.
bool SameSecret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<TenantTable> TenantTable::Create(const std::vector<TenantConfig>& tenants,
                                                const std::string& admin_token_file) {
  TenantTable table;
  table.tenants_ = tenants;
  uint32_t partitions = 0;  // 1, 2, ... in the order of the tenants with an L1 share
  for (size_t i = 0; i < tenants.size(); ++i) {
    const TenantConfig& t = tenants[i];
    uint32_t partition = t.l1_capacity != 0 ? ++partitions : 0;
    table.callers_.push_back(
        Caller{static_cast<TenantId>(i + 1), t.admin, t.name, t.shared_memory, partition});
  }
  auto add_token = [&table](const std::string& path, std::string_view key,
                            Caller caller) -> absl::Status {
    absl::StatusOr<std::string> text = ReadSecretFile(path, key);
    if (!text.ok()) return text.status();
    std::string token(absl::StripAsciiWhitespace(*text));
    for (const Token& t : table.tokens_) {
      if (t.token == token) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config key '", std::string(key), "': the same token is already another identity's"));
      }
    }
    table.tokens_.push_back({std::move(token), std::move(caller)});
    return absl::OkStatus();
  };
  if (!admin_token_file.empty()) {
    if (absl::Status s =
            add_token(admin_token_file, "server.auth_token_file", table.DefaultCaller());
        !s.ok()) {
      return s;
    }
  }
  for (size_t i = 0; i < tenants.size(); ++i) {
    if (tenants[i].token_file.empty()) continue;
    if (absl::Status s = add_token(tenants[i].token_file,
                                   absl::StrCat("tenants[", i, "].token_file"), table.callers_[i]);
        !s.ok()) {
      return s;
    }
  }
  return table;
}

Caller TenantTable::DefaultCaller() const {
  // Single-tenant: the default tenant's namespaces keep their pre-tenant fingerprints.
  return Caller{kDefaultTenant, true, multi_tenant() ? "default" : "", true};
}

std::vector<uint64_t> TenantTable::L1Shares() const {
  std::vector<uint64_t> shares;
  for (const TenantConfig& t : tenants_) {
    if (t.l1_capacity != 0) shares.push_back(t.l1_capacity);
  }
  return shares;
}

std::optional<Caller> TenantTable::ForPeer(uid_t uid, gid_t gid) const {
  if (!multi_tenant()) return DefaultCaller();
  for (size_t i = 0; i < tenants_.size(); ++i) {
    if (std::find(tenants_[i].uids.begin(), tenants_[i].uids.end(), uid) !=
        tenants_[i].uids.end()) {
      return callers_[i];
    }
  }
  for (size_t i = 0; i < tenants_.size(); ++i) {
    if (std::find(tenants_[i].gids.begin(), tenants_[i].gids.end(), gid) !=
        tenants_[i].gids.end()) {
      return callers_[i];
    }
  }
  return std::nullopt;
}

std::optional<Caller> TenantTable::ForToken(std::string_view token) const {
  if (tokens_.empty()) {  // TLS-only TCP: trusted on a single-tenant daemon only
    if (multi_tenant()) return std::nullopt;
    return DefaultCaller();
  }
  for (const Token& t : tokens_) {
    if (SameSecret(t.token, token)) {
      return t.caller;
    }
  }
  return std::nullopt;
}

absl::StatusOr<Caller> TenantTable::ForConnection(int fd) const {
  ucred peer{};
  socklen_t length = sizeof(peer);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0) {
    return absl::PermissionDeniedError("the peer's credentials cannot be read");
  }
  std::optional<Caller> caller = ForPeer(peer.uid, peer.gid);
  if (!caller.has_value()) {
    return absl::PermissionDeniedError(
        absl::StrCat("no tenant is configured for uid ", peer.uid, " gid ", peer.gid));
  }
  return *caller;
}

std::string TenantTable::Name(TenantId tenant) const {
  if (tenant == kDefaultTenant || tenant > tenants_.size()) return "default";
  return tenants_[tenant - 1].name;
}

}  // namespace kvstrata
