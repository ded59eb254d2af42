// ControlService: KV memory registration and GPU store/load jobs with their completions.
#include "absl/strings/str_cat.h"
#include "daemon/rpc/control_service.h"
#include "daemon/rpc/job_call.h"
#include "daemon/rpc/job_convert.h"
#include "daemon/rpc/request_validation.h"

namespace kvstrata {

grpc::Status ControlService::RegisterKvMemory(grpc::ServerContext* ctx,
                                              const v1::RegisterKvMemoryRequest* request,
                                              v1::RegisterKvMemoryResponse* response) {
  return context_.guard->Run(
      "Control.RegisterKvMemory", ctx, [&](const Caller& caller) -> absl::Status {
        absl::StatusOr<NamespaceInfo> ns = RequireSessionNamespace(
            context_, caller.tenant, request->session_id(), request->namespace_id());
        if (!ns.ok()) return ns.status();
        if (request->has_host()) {
          response->set_registration_id(context_.jobs->RegisterHost(request->session_id(), ns->id));
          return absl::OkStatus();
        }
        if (!request->has_cuda())
          return absl::InvalidArgumentError("memory: set either cuda or host");
        absl::StatusOr<CudaMemorySpec> spec = FromProto(request->cuda());
        if (!spec.ok()) return spec.status();
        absl::StatusOr<uint64_t> id =
            context_.jobs->RegisterCuda(request->session_id(), ns->id, ns->bytes_per_block, *spec);
        if (!id.ok()) return id.status();
        response->set_registration_id(*id);
        return absl::OkStatus();
      });
}

grpc::Status ControlService::UnregisterKvMemory(grpc::ServerContext* ctx,
                                                const v1::UnregisterKvMemoryRequest* request,
                                                v1::UnregisterKvMemoryResponse*) {
  return context_.guard->Run(
      "Control.UnregisterKvMemory", ctx, [&](const Caller& caller) -> absl::Status {
        if (absl::Status s = context_.sessions->Check(request->session_id(), caller.tenant);
            !s.ok())
          return s;
        return context_.jobs->Unregister(request->session_id(), request->registration_id());
      });
}

grpc::Status ControlService::SubmitStore(grpc::ServerContext* ctx,
                                         const v1::SubmitStoreRequest* request,
                                         v1::SubmitJobResponse* response) {
  return context_.guard->Run("Control.SubmitStore", ctx, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<JobBlocks> blocks = JobBlocksFromRequest(*request);
    if (!blocks.ok()) return blocks.status();
    JobCall call{
        JobCall::Kind::kStore,      caller.tenant, request->session_id(), request->namespace_id(),
        request->registration_id(), blocks->keys,  blocks->block_ids,     request->wait_event()};
    absl::StatusOr<uint64_t> job = RunSubmitJob(context_, call);
    if (!job.ok()) return job.status();
    response->set_job_id(*job);
    return absl::OkStatus();
  });
}

grpc::Status ControlService::SubmitLoad(grpc::ServerContext* ctx,
                                        const v1::SubmitLoadRequest* request,
                                        v1::SubmitJobResponse* response) {
  return context_.guard->Run("Control.SubmitLoad", ctx, [&](const Caller& caller) -> absl::Status {
    absl::StatusOr<JobBlocks> blocks = JobBlocksFromRequest(*request);
    if (!blocks.ok()) return blocks.status();
    JobCall call{
        JobCall::Kind::kLoad,       caller.tenant, request->session_id(), request->namespace_id(),
        request->registration_id(), blocks->keys,  blocks->block_ids};
    call.lease_id = request->lease_id();
    call.layer_flag_value = request->layer_flag_value();
    absl::StatusOr<uint64_t> job = RunSubmitJob(context_, call);
    if (!job.ok()) return job.status();
    response->set_job_id(*job);
    return absl::OkStatus();
  });
}

grpc::Status ControlService::CancelJob(grpc::ServerContext* ctx,
                                       const v1::CancelJobRequest* request,
                                       v1::CancelJobResponse* response) {
  return context_.guard->Run("Control.CancelJob", ctx, [&](const Caller& caller) -> absl::Status {
    if (absl::Status s = context_.sessions->Check(request->session_id(), caller.tenant); !s.ok())
      return s;
    absl::StatusOr<bool> cancelled =
        context_.jobs->Cancel(request->session_id(), request->job_id());
    if (!cancelled.ok()) return cancelled.status();
    response->set_cancelled(*cancelled);
    return absl::OkStatus();
  });
}

grpc::Status ControlService::PollCompletions(grpc::ServerContext* ctx,
                                             const v1::PollCompletionsRequest* request,
                                             v1::PollCompletionsResponse* response) {
  return context_.guard->Run(
      "Control.PollCompletions", ctx, [&](const Caller& caller) -> absl::Status {
        if (absl::Status s = context_.sessions->Check(request->session_id(), caller.tenant);
            !s.ok())
          return s;
        for (const JobCompletion& completion :
             context_.jobs->completions().Poll(request->session_id(), request->max_completions())) {
          ToProto(completion, response->add_completions());
        }
        return absl::OkStatus();
      });
}

grpc::Status ControlService::WatchCompletions(grpc::ServerContext* ctx,
                                              const v1::WatchCompletionsRequest* request,
                                              grpc::ServerWriter<v1::JobCompletion>* writer) {
  return context_.guard->Run(
      "Control.WatchCompletions", ctx, [&](const Caller& caller) -> absl::Status {
        uint64_t session = request->session_id();
        if (absl::Status s = context_.sessions->Check(session, caller.tenant); !s.ok()) return s;
        CompletionQueue& queue = context_.jobs->completions();
        while (!ctx->IsCancelled()) {
          if (!queue.Wait(session, absl::Milliseconds(200))) {
            return context_.sessions->Check(session, caller.tenant).ok()
                       ? absl::UnavailableError("the daemon is shutting down")
                       : absl::OkStatus();  // The session ended: the stream ends.
          }
          for (const JobCompletion& completion : queue.Poll(session, 0)) {
            v1::JobCompletion out;
            ToProto(completion, &out);
            if (!writer->Write(out)) return absl::CancelledError("the watcher went away");
          }
        }
        return absl::CancelledError("the watcher cancelled the stream");
      });
}

}  // namespace kvstrata
