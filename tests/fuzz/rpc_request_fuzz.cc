// libFuzzer target: the checks every RPC runs on its request, then the call itself, on any
// bytes parsed as a request message (what gRPC hands the handlers), against a live daemon
// core (tests/fuzz/fuzz_daemon.h): Lookup (RunLookup), SubmitLoad / SubmitStore
// (JobBlocksFromRequest, RunSubmitJob), ReserveStore and AcquireLoad (RequireHostModeNamespace,
// then the cache; what they take is given back). Byte 0 picks the message (bits 0-2) and
// whether it is aimed at the live session and namespace (bit 3). A crash or a sanitizer
// report fails; so does a call that succeeds on an unknown session.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/rpc/cache_convert.h"
#include "daemon/rpc/job_call.h"
#include "daemon/rpc/job_convert.h"
#include "daemon/rpc/lookup_call.h"
#include "daemon/rpc/request_validation.h"
#include "kvstrata/v1/control.pb.h"
#include "tests/fuzz/fuzz_daemon.h"

namespace {

using kvstrata::FuzzDaemon;

template <typename Request>
bool Parse(const uint8_t* data, size_t size, bool aim, Request* request) {
  if (!request->ParseFromArray(data, static_cast<int>(size))) return false;
  if (aim) {
    request->set_session_id(FuzzDaemon::Get().session);
    request->set_namespace_id(FuzzDaemon::Get().ns);
  }
  return true;
}

void Expect(bool ok, uint64_t session) {
  // Nothing may succeed for a session the daemon never opened.
  if (ok && session != FuzzDaemon::Get().session) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  FuzzDaemon& d = FuzzDaemon::Get();
  const kvstrata::ServiceContext& ctx = d.context;
  const kvstrata::Caller caller;  // the default tenant (single-tenant daemon)
  const bool aim = (data[0] & 8) != 0;
  ++data;
  --size;
  switch (data[-1] & 7) {
    case 0: {
      kvstrata::v1::LookupRequest q;
      if (!Parse(data, size, aim, &q)) return 0;
      if (!kvstrata::ValidateKeys(q.keys()).ok()) return 0;
      std::vector<std::string_view> keys = kvstrata::KeyViews(q.keys());
      auto answer =
          kvstrata::RunLookup(ctx, {caller.tenant, q.session_id(), q.namespace_id(), keys,
                                    q.acquire_lease(), q.lease_ttl_ms(), q.skip_promotion()});
      Expect(answer.ok(), q.session_id());
      if (answer.ok() && answer->result.lease.has_value()) {
        (void)ctx.cache->ReleaseLease(q.session_id(), *answer->result.lease);
      }
      return 0;
    }
    case 1:
    case 2: {
      const bool load = (data[-1] & 7) == 1;
      kvstrata::v1::SubmitLoadRequest ql;
      kvstrata::v1::SubmitStoreRequest qs;
      if (load ? !Parse(data, size, aim, &ql) : !Parse(data, size, aim, &qs)) return 0;
      auto blocks = load ? kvstrata::JobBlocksFromRequest(ql) : kvstrata::JobBlocksFromRequest(qs);
      if (!blocks.ok()) return 0;
      kvstrata::JobCall call{
          load ? kvstrata::JobCall::Kind::kLoad : kvstrata::JobCall::Kind::kStore,
          caller.tenant,
          load ? ql.session_id() : qs.session_id(),
          load ? ql.namespace_id() : qs.namespace_id(),
          load ? ql.registration_id() : qs.registration_id(),
          blocks->keys,
          blocks->block_ids,
          load ? 0 : qs.wait_event(),
          load ? ql.lease_id() : 0,
          load ? ql.layer_flag_value() : 0};
      auto job = kvstrata::RunSubmitJob(ctx, call);
      if (job.ok()) __builtin_trap();  // no registration exists: no job may start
      return 0;
    }
    case 3: {
      kvstrata::v1::ReserveStoreRequest q;
      if (!Parse(data, size, aim, &q)) return 0;
      auto host = kvstrata::RequireHostModeNamespace(ctx, caller, q.session_id(), q.namespace_id());
      Expect(host.ok(), q.session_id());
      if (!host.ok() || !kvstrata::ValidateKeys(q.keys()).ok()) return 0;
      std::vector<std::string_view> keys = kvstrata::KeyViews(q.keys());
      auto reserved =
          ctx.cache->ReserveStore(q.session_id(), host->ns.id, host->ns.bytes_per_block, keys);
      if (reserved.ok()) (void)ctx.cache->AbortStore(q.session_id(), reserved->reservation);
      return 0;
    }
    default: {
      kvstrata::v1::AcquireLoadRequest q;
      if (!Parse(data, size, aim, &q)) return 0;
      auto host = kvstrata::RequireHostModeNamespace(ctx, caller, q.session_id(), q.namespace_id());
      Expect(host.ok(), q.session_id());
      if (!host.ok() || !kvstrata::ValidateKeys(q.keys()).ok()) return 0;
      std::vector<std::string_view> keys = kvstrata::KeyViews(q.keys());
      std::optional<kvstrata::LeaseId> lease;
      if (q.lease_id() != 0) lease = q.lease_id();
      auto loaded = ctx.cache->AcquireLoad(q.session_id(), host->ns.id, keys, lease);
      if (loaded.ok()) {
        for (const kvstrata::LoadSlot& slot : loaded->slots) {
          if (slot.status == kvstrata::LoadStatus::kReady &&
              slot.offset + slot.length > ctx.region->size()) {
            __builtin_trap();  // a slot outside the region
          }
        }
        if (loaded->load != 0) (void)ctx.cache->ReleaseLoad(q.session_id(), loaded->load);
      }
      return 0;
    }
  }
}
