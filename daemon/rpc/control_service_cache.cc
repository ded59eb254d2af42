// ControlService: lookup, leases and host-mode store/load, through the BlockStore.

#include "daemon/rpc/cache_convert.h"
#include "daemon/rpc/control_service.h"
#include "daemon/rpc/lease_adoption.h"
#include "daemon/rpc/lookup_call.h"
#include "daemon/rpc/proto_convert.h"
#include "daemon/rpc/request_validation.h"

namespace kvstrata {

grpc::ServerUnaryReactor* ControlService::Lookup(grpc::CallbackServerContext* ctx,
                                                 const v1::LookupRequest* request,
                                                 v1::LookupResponse* response) {
  return Finish(
      ctx, context_.guard->Run("Control.Lookup", ctx, [&](const Caller& caller) -> absl::Status {
        std::vector<std::string_view> keys = KeyViews(request->keys());
        absl::StatusOr<LookupAnswer> answer =
            RunLookup(context_, {caller.tenant, request->session_id(), request->namespace_id(),
                                 keys, request->acquire_lease(), request->lease_ttl_ms(),
                                 request->skip_promotion()});
        if (!answer.ok()) return answer.status();
        response->set_hit_blocks(static_cast<uint32_t>(answer->result.hits));
        for (Tier tier : answer->result.tiers) response->add_locations()->set_tier(ToProto(tier));
        if (answer->result.lease.has_value()) {
          response->set_lease_id(*answer->result.lease);
          response->set_lease_expires_unix_ms(answer->lease_expires_unix_ms);
        }
        return absl::OkStatus();
      }));
}

grpc::Status ControlService::ReleaseLease(grpc::ServerContext* ctx,
                                          const v1::ReleaseLeaseRequest* request,
                                          v1::ReleaseLeaseResponse*) {
  return context_.guard->Run(
      "Control.ReleaseLease", ctx, [&](const Caller& caller) -> absl::Status {
        if (absl::Status s = context_.sessions->Check(request->session_id(), caller.tenant);
            !s.ok())
          return s;
        return context_.cache->ReleaseLease(request->session_id(), request->lease_id());
      });
}

grpc::ServerUnaryReactor* ControlService::ReserveStore(grpc::CallbackServerContext* ctx,
                                                       const v1::ReserveStoreRequest* request,
                                                       v1::ReserveStoreResponse* response) {
  return Finish(ctx, context_.guard->Run(
                         "Control.ReserveStore", ctx, [&](const Caller& caller) -> absl::Status {
                           absl::StatusOr<HostModeNamespace> host = RequireHostModeNamespace(
                               context_, caller, request->session_id(), request->namespace_id());
                           if (!host.ok()) return host.status();
                           if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return s;
                           std::vector<std::string_view> keys = KeyViews(request->keys());
                           absl::StatusOr<ReserveResult> result = context_.cache->ReserveStore(
                               request->session_id(), host->ns.id, host->ns.bytes_per_block, keys);
                           if (!result.ok()) return result.status();
                           response->set_reservation_id(result->reservation);
                           for (const StoreSlot& slot : result->slots)
                             ToProto(slot, host->base, response->add_slots());
                           return absl::OkStatus();
                         }));
}

grpc::ServerUnaryReactor* ControlService::CommitStore(grpc::CallbackServerContext* ctx,
                                                      const v1::CommitStoreRequest* request,
                                                      v1::CommitStoreResponse* response) {
  return Finish(
      ctx,
      context_.guard->Run("Control.CommitStore", ctx, [&](const Caller& caller) -> absl::Status {
        if (absl::Status s = context_.sessions->Check(request->session_id(), caller.tenant);
            !s.ok())
          return s;
        if (request->abort()) {
          return context_.cache->AbortStore(request->session_id(), request->reservation_id());
        }
        std::optional<absl::Span<const uint32_t>> written;
        if (!request->written().empty()) {
          written = absl::MakeConstSpan(request->written().data(), request->written().size());
        }
        absl::StatusOr<size_t> committed =
            context_.cache->CommitStore(request->session_id(), request->reservation_id(), written);
        if (!committed.ok()) return committed.status();
        response->set_committed_blocks(static_cast<uint32_t>(*committed));
        return absl::OkStatus();
      }));
}

grpc::ServerUnaryReactor* ControlService::AcquireLoad(grpc::CallbackServerContext* ctx,
                                                      const v1::AcquireLoadRequest* request,
                                                      v1::AcquireLoadResponse* response) {
  return Finish(
      ctx,
      context_.guard->Run("Control.AcquireLoad", ctx, [&](const Caller& caller) -> absl::Status {
        absl::StatusOr<HostModeNamespace> host = RequireHostModeNamespace(
            context_, caller, request->session_id(), request->namespace_id());
        if (!host.ok()) return host.status();
        const NamespaceInfo* ns = &host->ns;
        if (absl::Status s = ValidateKeys(request->keys()); !s.ok()) return s;
        std::optional<LeaseId> lease;
        if (request->lease_id() != 0) {
          // Another session's (same tenant) passes to this one; one that
          // has ended stays NOT_FOUND (AcquireLoad says so).
          absl::StatusOr<bool> adopted =
              AdoptLease(context_, caller.tenant, request->session_id(), request->lease_id());
          if (!adopted.ok()) return adopted.status();
          lease = request->lease_id();
        }
        std::vector<std::string_view> keys = KeyViews(request->keys());
        absl::StatusOr<LoadResult> result =
            context_.store->AcquireLoad(request->session_id(), ns->id, keys, lease);
        if (!result.ok()) return result.status();
        response->set_load_id(result->load);
        for (const LoadSlot& slot : result->slots) ToProto(slot, host->base, response->add_slots());
        return absl::OkStatus();
      }));
}

grpc::ServerUnaryReactor* ControlService::ReleaseLoad(grpc::CallbackServerContext* ctx,
                                                      const v1::ReleaseLoadRequest* request,
                                                      v1::ReleaseLoadResponse*) {
  return Finish(
      ctx,
      context_.guard->Run("Control.ReleaseLoad", ctx, [&](const Caller& caller) -> absl::Status {
        if (absl::Status s = context_.sessions->Check(request->session_id(), caller.tenant);
            !s.ok())
          return s;
        return context_.cache->ReleaseLoad(request->session_id(), request->load_id());
      }));
}

}  // namespace kvstrata
