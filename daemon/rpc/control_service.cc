#include "daemon/rpc/control_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/version.h"
#include "daemon/rpc/proto_convert.h"

namespace kvstrata {

ControlService::ControlService(ServiceContext context)
    : context_(context),
      lookup_pool_([](const v1::LookupRequest& q, const v1::LookupResponse& r) {
        return static_cast<size_t>(q.keys_size() + r.locations_size());
      }),
      reserve_pool_([](const v1::ReserveStoreRequest& q, const v1::ReserveStoreResponse& r) {
        return static_cast<size_t>(q.keys_size() + r.slots_size());
      }),
      commit_pool_([](const v1::CommitStoreRequest&, const v1::CommitStoreResponse&) {
        return size_t{0};  // `written` is a packed scalar field: one buffer
      }),
      acquire_pool_([](const v1::AcquireLoadRequest& q, const v1::AcquireLoadResponse& r) {
        return static_cast<size_t>(q.keys_size() + r.slots_size());
      }),
      release_pool_(
          [](const v1::ReleaseLoadRequest&, const v1::ReleaseLoadResponse&) { return size_t{0}; }) {
  SetMessageAllocatorFor_Lookup(&lookup_pool_);
  SetMessageAllocatorFor_ReserveStore(&reserve_pool_);
  SetMessageAllocatorFor_CommitStore(&commit_pool_);
  SetMessageAllocatorFor_AcquireLoad(&acquire_pool_);
  SetMessageAllocatorFor_ReleaseLoad(&release_pool_);
}

grpc::ServerUnaryReactor* ControlService::Finish(grpc::CallbackServerContext* ctx,
                                                 grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

grpc::Status ControlService::OpenSession(grpc::ServerContext* ctx,
                                         const v1::OpenSessionRequest* request,
                                         v1::OpenSessionResponse* response) {
  return context_.guard->Run("Control.OpenSession", ctx, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<SessionInfo> session = context_.sessions->Open(
        caller.tenant, request->client_name(), request->pid(), request->hostname(),
        absl::Milliseconds(request->heartbeat_timeout_ms()));
    if (!session.ok()) return session.status();
    response->set_session_id(session->id);
    context_.jobs->OpenSession(session->id);
    response->set_heartbeat_timeout_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(session->heartbeat_timeout)));
    response->set_daemon_version(kVersion);
    response->set_daemon_instance_id(context_.identity->instance_id);
    std::optional<uint32_t> mapped = MappedPartition(caller);  // what its host mode maps
    response->set_shm_region_bytes(mapped.has_value() ? context_.region->partition_size(*mapped)
                                                      : 0);
    response->set_shm_fd_socket(context_.shm_fd_socket);
    response->set_lookup_socket(context_.lookup_socket);
    response->set_packed_transfers(true);
    response->set_socket_completions(true);
    return absl::OkStatus();
  });
}

grpc::Status ControlService::Heartbeat(grpc::ServerContext* ctx,
                                       const v1::HeartbeatRequest* request,
                                       v1::HeartbeatResponse* response) {
  return context_.guard->Run("Control.Heartbeat", ctx, [&](const Caller& caller) -> absl::Status {
    ClientCounterValues counters(request->counters().begin(), request->counters().end());
    if (absl::Status s = ValidateClientCounters(counters); !s.ok()) return s;
    response->set_server_time_unix_ms(UnixMillis(absl::Now()));
    if (counters.empty() || context_.client_counters == nullptr) {
      return context_.sessions->Heartbeat(request->session_id(), caller.tenant);
    }
    return context_.sessions->Heartbeat(request->session_id(), caller.tenant, [&] {
      return context_.client_counters->Report(request->session_id(), counters);
    });
  });
}

grpc::Status ControlService::CloseSession(grpc::ServerContext* ctx,
                                          const v1::CloseSessionRequest* request,
                                          v1::CloseSessionResponse*) {
  return context_.guard->Run("Control.CloseSession", ctx, [&](const Caller& caller) {
    return context_.sessions->Close(request->session_id(), caller.tenant);
  });
}

grpc::Status ControlService::RegisterNamespace(grpc::ServerContext* ctx,
                                               const v1::RegisterNamespaceRequest* request,
                                               v1::RegisterNamespaceResponse* response) {
  return context_.guard->Run(
      "Control.RegisterNamespace", ctx, [&](const Caller& caller) -> absl::Status {
        if (absl::Status s = context_.sessions->Check(request->session_id(), caller.tenant);
            !s.ok()) {
          return s;
        }
        if (!request->has_spec()) return absl::InvalidArgumentError("spec is required");
        NamespaceSpec spec = FromProto(request->spec());
        spec.scope = caller.namespace_scope;  // the caller's tenant, never the request's
        absl::StatusOr<NamespaceInfo> info =
            context_.namespaces->Register(request->session_id(), std::move(spec));
        if (!info.ok()) return info.status();
        // The tenant's blocks live in its own L1 partition when it has one.
        context_.cache->AssignPartition(info->id, caller.partition);
        response->set_namespace_id(info->id);
        response->set_fingerprint(info->fingerprint);
        response->set_bytes_per_block(info->bytes_per_block);
        return absl::OkStatus();
      });
}

}  // namespace kvstrata
