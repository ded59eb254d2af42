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
      context.store->Lookup(call.session_id, ns->id, call.keys, ttl,
                            call.skip_promotion ? LookupPromotion::kSkip : LookupPromotion::kStart);
  if (!result.ok()) return result.status();
  if (context.metrics != nullptr) RecordLookup(*context.metrics, *ns, call.keys.size(), *result);
  LookupAnswer answer{std::move(*result), 0};
  if (answer.result.lease.has_value()) {
    answer.lease_expires_unix_ms = UnixMillis(absl::Now() + *ttl);
  }
  return answer;
}

absl::StatusOr<NamespacesAnswer> RunLookups(const ServiceContext& context, const LookupCall& call,
                                            absl::Span<const uint32_t> namespaces) {
  NamespacesAnswer out;
  out.leases.assign(namespaces.size(), 0);
  out.hits = call.keys.size();
  LookupCall one = call;
  for (size_t i = 0; i < namespaces.size() && out.hits > 0; ++i) {
    one.namespace_id = namespaces[i];
    one.keys = call.keys.first(out.hits);
    absl::StatusOr<LookupAnswer> answer = RunLookup(context, one);
    if (!answer.ok()) {
      for (LeaseId lease : out.leases) {
        if (lease != 0) context.cache->ReleaseLease(call.session_id, lease).IgnoreError();
      }
      return answer.status();
    }
    const LookupResult& r = answer->result;
    out.leases[i] = r.lease.value_or(0);
    if (r.lease.has_value()) out.lease_expires_unix_ms = answer->lease_expires_unix_ms;
    if (i == 0) out.tiers = r.tiers;
    out.hits = std::min(out.hits, r.hits);
    out.tiers.resize(out.hits);
    for (size_t k = 0; k < out.hits; ++k) {
      if (TierIndex(r.tiers[k]) > TierIndex(out.tiers[k])) out.tiers[k] = r.tiers[k];
    }
  }
  if (namespaces.empty()) out.hits = 0;
  return out;
}

}  // namespace kvstrata
