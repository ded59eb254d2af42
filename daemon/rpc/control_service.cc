#include "daemon/rpc/control_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/version.h"
#include "daemon/rpc/proto_convert.h"
#include "daemon/rpc/request_validation.h"

namespace kvstrata {
namespace {

absl::Status NotYet(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(what, " is not available in this daemon yet"));
}

absl::Status ValidateTransfers(const google::protobuf::RepeatedPtrField<v1::BlockTransfer>& blocks) {
  google::protobuf::RepeatedPtrField<std::string> keys;
  for (const v1::BlockTransfer& block : blocks) *keys.Add() = block.key();
  return ValidateKeys(keys, "blocks");
}

}  // namespace

grpc::Status ControlService::OpenSession(grpc::ServerContext* ctx,
                                         const v1::OpenSessionRequest* request,
                                         v1::OpenSessionResponse* response) {
  return context_.guard->Run("Control.OpenSession", ctx, [&]() -> absl::Status {
    absl::StatusOr<SessionInfo> session = context_.sessions->Open(
        request->client_name(), request->pid(), request->hostname(),
        absl::Milliseconds(request->heartbeat_timeout_ms()));
    if (!session.ok()) return session.status();
    response->set_session_id(session->id);
    response->set_heartbeat_timeout_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(session->heartbeat_timeout)));
    response->set_daemon_version(kVersion);
    response->set_daemon_instance_id(context_.identity->instance_id);
    response->set_shm_region_bytes(context_.shm_region_bytes);
    response->set_shm_fd_socket(context_.shm_fd_socket);
    return absl::OkStatus();
  });
}

grpc::Status ControlService::Heartbeat(grpc::ServerContext* ctx,
                                       const v1::HeartbeatRequest* request,
                                       v1::HeartbeatResponse* response) {
  return context_.guard->Run("Control.Heartbeat", ctx, [&] {
    response->set_server_time_unix_ms(UnixMillis(absl::Now()));
    return context_.sessions->Heartbeat(request->session_id());
  });
}

grpc::Status ControlService::CloseSession(grpc::ServerContext* ctx,
                                          const v1::CloseSessionRequest* request,
                                          v1::CloseSessionResponse*) {
  return context_.guard->Run("Control.CloseSession", ctx,
                             [&] { return context_.sessions->Close(request->session_id()); });
}

grpc::Status ControlService::RegisterNamespace(grpc::ServerContext* ctx,
                                               const v1::RegisterNamespaceRequest* request,
                                               v1::RegisterNamespaceResponse* response) {
  return context_.guard->Run("Control.RegisterNamespace", ctx, [&]() -> absl::Status {
    if (absl::Status s = context_.sessions->Check(request->session_id()); !s.ok()) return s;
    if (!request->has_spec()) return absl::InvalidArgumentError("spec is required");
    absl::StatusOr<NamespaceInfo> info =
        context_.namespaces->Register(request->session_id(), FromProto(request->spec()));
    if (!info.ok()) return info.status();
    response->set_namespace_id(info->id);
    response->set_fingerprint(info->fingerprint);
    response->set_bytes_per_block(info->bytes_per_block);
    return absl::OkStatus();
  });
}

grpc::Status ControlService::RegisterKvMemory(grpc::ServerContext* ctx,
                                              const v1::RegisterKvMemoryRequest* request,
                                              v1::RegisterKvMemoryResponse*) {
  return context_.guard->Run("Control.RegisterKvMemory", ctx, [&]() -> absl::Status {
    absl::StatusOr<NamespaceInfo> ns =
        RequireSessionNamespace(context_, request->session_id(), request->namespace_id());
    if (!ns.ok()) return ns.status();
    if (request->memory_case() == v1::RegisterKvMemoryRequest::MEMORY_NOT_SET) {
      return absl::InvalidArgumentError("memory: set either cuda or host");
    }
    return NotYet("KV memory registration (host mode needs none; CUDA IPC comes with the GPU "
                  "data path)");
  });
}

grpc::Status ControlService::SubmitStore(grpc::ServerContext* ctx,
                                         const v1::SubmitStoreRequest* request,
                                         v1::SubmitJobResponse*) {
  return context_.guard->Run("Control.SubmitStore", ctx, [&]() -> absl::Status {
    absl::StatusOr<NamespaceInfo> ns =
        RequireSessionNamespace(context_, request->session_id(), request->namespace_id());
    if (!ns.ok()) return ns.status();
    if (absl::Status s = ValidateTransfers(request->blocks()); !s.ok()) return s;
    return NotYet("GPU store jobs");
  });
}

grpc::Status ControlService::SubmitLoad(grpc::ServerContext* ctx,
                                        const v1::SubmitLoadRequest* request,
                                        v1::SubmitJobResponse*) {
  return context_.guard->Run("Control.SubmitLoad", ctx, [&]() -> absl::Status {
    absl::StatusOr<NamespaceInfo> ns =
        RequireSessionNamespace(context_, request->session_id(), request->namespace_id());
    if (!ns.ok()) return ns.status();
    if (absl::Status s = ValidateTransfers(request->blocks()); !s.ok()) return s;
    return NotYet("GPU load jobs");
  });
}


grpc::Status ControlService::UnregisterKvMemory(grpc::ServerContext* ctx,
                                                const v1::UnregisterKvMemoryRequest* request,
                                                v1::UnregisterKvMemoryResponse*) {
  return context_.guard->Run("Control.UnregisterKvMemory", ctx, [&]() -> absl::Status {
    if (absl::Status s = context_.sessions->Check(request->session_id()); !s.ok()) return s;
    return absl::NotFoundError(
        absl::StrCat("registration ", request->registration_id(), " is unknown"));
  });
}

grpc::Status ControlService::CancelJob(grpc::ServerContext* ctx,
                                       const v1::CancelJobRequest* request,
                                       v1::CancelJobResponse*) {
  return context_.guard->Run("Control.CancelJob", ctx, [&]() -> absl::Status {
    if (absl::Status s = context_.sessions->Check(request->session_id()); !s.ok()) return s;
    return absl::NotFoundError(absl::StrCat("job ", request->job_id(), " is unknown"));
  });
}

grpc::Status ControlService::PollCompletions(grpc::ServerContext* ctx,
                                             const v1::PollCompletionsRequest* request,
                                             v1::PollCompletionsResponse*) {
  // No job can exist before the GPU data path: a valid session has nothing pending.
  return context_.guard->Run("Control.PollCompletions", ctx, [&] {
    return context_.sessions->Check(request->session_id());
  });
}

grpc::Status ControlService::WatchCompletions(grpc::ServerContext* ctx,
                                              const v1::WatchCompletionsRequest* request,
                                              grpc::ServerWriter<v1::JobCompletion>*) {
  return context_.guard->Run("Control.WatchCompletions", ctx, [&]() -> absl::Status {
    if (absl::Status s = context_.sessions->Check(request->session_id()); !s.ok()) return s;
    return NotYet("WatchCompletions (GPU jobs)");
  });
}

}  // namespace kvstrata
