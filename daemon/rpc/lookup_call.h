// The one Lookup: what Control.Lookup (gRPC) and the fast path (FastPathServer) both
// run after decoding their request. Checks the session and namespace
// (RequireSessionNamespace) and the keys (ValidateKeys), in that order, turns the lease
// request into a TTL (0 = sessions.lease_ttl_ms, clamped to sessions.max_lease_ttl_ms) and
// calls BlockStore::Lookup (promoting the hits below L1 unless skip_promotion). Errors are those of
// the checks and of BlockCache::Lookup. Thread-safe (as BlockCache is).
#ifndef KVSTRATA_DAEMON_RPC_LOOKUP_CALL_H_
#define KVSTRATA_DAEMON_RPC_LOOKUP_CALL_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/cache/cache_types.h"
#include "daemon/common/ids.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

struct LookupCall {
  TenantId tenant = kDefaultTenant;  // the caller's (the session must be this tenant's)
  SessionId session_id = 0;
  uint32_t namespace_id = 0;
  absl::Span<const std::string_view> keys;  // Not owned; valid during the call.
  bool acquire_lease = false;
  uint32_t lease_ttl_ms = 0;  // 0: the configured default.
  // With acquire_lease: the hits below L1 are answered, not promoted (BlockStore::Lookup).
  bool skip_promotion = false;
};

struct LookupAnswer {
  LookupResult result;
  uint64_t lease_expires_unix_ms = 0;  // 0 when no lease was taken.
};

absl::StatusOr<LookupAnswer> RunLookup(const ServiceContext& context, const LookupCall& call);

// One chain in several namespaces (the fast path's version-2 frame): RunLookup for
// each of `namespaces` in order (call.namespace_id is ignored), each asked for the leading
// keys every namespace before it holds; a namespace that holds none ends it (the later
// ones are not asked).
struct NamespacesAnswer {
  size_t hits = 0;                     // leading keys every namespace holds
  std::vector<Tier> tiers;             // per hit: the slowest tier any namespace holds it in
  std::vector<LeaseId> leases;         // per namespace of the call: its lease, 0 for none
  uint64_t lease_expires_unix_ms = 0;  // 0 when no lease was taken
};
// Errors as RunLookup's for the first namespace that fails; the leases taken for the
// namespaces before it are released first.
absl::StatusOr<NamespacesAnswer> RunLookups(const ServiceContext& context, const LookupCall& call,
                                            absl::Span<const uint32_t> namespaces);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_LOOKUP_CALL_H_
