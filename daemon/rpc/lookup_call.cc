#include "daemon/rpc/lookup_call.h"

#include <algorithm>
#include <optional>

#include "absl/time/clock.h"
#include "daemon/rpc/proto_convert.h"
#include "daemon/rpc/request_validation.h"

namespace kvstrata {
namespace {

void RecordLookup(MetricsSink& metrics, const NamespaceInfo& ns, size_t requested,
                  const LookupResult& result) {
  LookupSample sample;
  sample.requested_blocks = requested;
  for (Tier tier : result.tiers) {
    int t = TierIndex(tier);
    sample.hit_blocks[t] += 1;
    sample.hit_tokens[t] += ns.spec.tokens_per_block;
  }
  metrics.RecordLookup(sample);
}

}  // namespace

absl::StatusOr<LookupAnswer> RunLookup(const ServiceContext& context, const LookupCall& call) {
  absl::StatusOr<NamespaceInfo> ns =
      RequireSessionNamespace(context, call.tenant, call.session_id, call.namespace_id);
  if (!ns.ok()) return ns.status();
  if (absl::Status s = ValidateKeys(call.keys); !s.ok()) return s;
  std::optional<absl::Duration> ttl;
  if (call.acquire_lease) ttl = context.store->LeaseTtl(absl::Milliseconds(call.lease_ttl_ms));
  absl::StatusOr<LookupResult> result =
      context.store->Lookup(call.session_id, ns->id, call.keys, ttl);
  if (!result.ok()) return result.status();
  if (context.metrics != nullptr) RecordLookup(*context.metrics, *ns, call.keys.size(), *result);
  LookupAnswer answer{std::move(*result), 0};
  if (answer.result.lease.has_value()) {
    answer.lease_expires_unix_ms = UnixMillis(absl::Now() + *ttl);
  }
  return answer;
}

}  // namespace kvstrata
