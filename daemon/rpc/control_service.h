// kvstrata.v1.Control: translates gRPC calls into calls on the daemon core. Every request
// is validated before it reaches the core. Sessions, namespaces and GPU jobs are in
// control_service.cc; lookup, leases and host-mode store/load in control_service_cache.cc;
// KV events in control_service_events.cc.
// The hot host-mode methods (Lookup, ReserveStore, CommitStore, AcquireLoad, ReleaseLoad)
// use gRPC's callback API: they run on the thread that read the request (no hand-off to a
// sync-server thread: one wake-up less per call) with recycled messages (MessagePool).
// Blocking: they take short locks and never do I/O themselves, but with L2/L3 enabled
// Lookup waits up to the lower tiers' probe_timeout for file probes (l2/l3.probe_timeout_ms,
// 5 ms by default) and AcquireLoad up to promotion_wait (l1.promotion_wait_ms, 5 s) for
// blocks coming up from L2/L3, on that gRPC thread (BlockStore, daemon/store). Without
// lower tiers neither waits. Thread-safe (gRPC calls it from many threads).
#ifndef KVSTRATA_DAEMON_RPC_CONTROL_SERVICE_H_
#define KVSTRATA_DAEMON_RPC_CONTROL_SERVICE_H_

#include "daemon/rpc/message_pool.h"
#include "daemon/rpc/service_context.h"
#include "kvstrata/v1/control.grpc.pb.h"

namespace kvstrata {

using ControlServiceBase =
    v1::Control::WithCallbackMethod_Lookup<v1::Control::WithCallbackMethod_ReserveStore<
        v1::Control::WithCallbackMethod_CommitStore<v1::Control::WithCallbackMethod_AcquireLoad<
            v1::Control::WithCallbackMethod_ReleaseLoad<v1::Control::Service>>>>>;

class ControlService final : public ControlServiceBase {
 public:
  explicit ControlService(ServiceContext context);

  grpc::Status OpenSession(grpc::ServerContext* ctx, const v1::OpenSessionRequest* request,
                           v1::OpenSessionResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status CloseSession(grpc::ServerContext* ctx, const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse* response) override;
  grpc::Status RegisterNamespace(grpc::ServerContext* ctx,
                                 const v1::RegisterNamespaceRequest* request,
                                 v1::RegisterNamespaceResponse* response) override;
  grpc::Status RegisterKvMemory(grpc::ServerContext* ctx,
                                const v1::RegisterKvMemoryRequest* request,
                                v1::RegisterKvMemoryResponse* response) override;
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* ctx,
                                   const v1::LookupRequest* request,
                                   v1::LookupResponse* response) override;
  grpc::ServerUnaryReactor* ReserveStore(grpc::CallbackServerContext* ctx,
                                         const v1::ReserveStoreRequest* request,
                                         v1::ReserveStoreResponse* response) override;
  grpc::ServerUnaryReactor* AcquireLoad(grpc::CallbackServerContext* ctx,
                                        const v1::AcquireLoadRequest* request,
                                        v1::AcquireLoadResponse* response) override;
  grpc::Status ReleaseLease(grpc::ServerContext* ctx, const v1::ReleaseLeaseRequest* request,
                            v1::ReleaseLeaseResponse* response) override;
  grpc::ServerUnaryReactor* CommitStore(grpc::CallbackServerContext* ctx,
                                        const v1::CommitStoreRequest* request,
                                        v1::CommitStoreResponse* response) override;
  grpc::ServerUnaryReactor* ReleaseLoad(grpc::CallbackServerContext* ctx,
                                        const v1::ReleaseLoadRequest* request,
                                        v1::ReleaseLoadResponse* response) override;
  grpc::Status UnregisterKvMemory(grpc::ServerContext* ctx,
                                  const v1::UnregisterKvMemoryRequest* request,
                                  v1::UnregisterKvMemoryResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status PollCompletions(grpc::ServerContext* ctx, const v1::PollCompletionsRequest* request,
                               v1::PollCompletionsResponse* response) override;
  grpc::Status WatchCompletions(grpc::ServerContext* ctx,
                                const v1::WatchCompletionsRequest* request,
                                grpc::ServerWriter<v1::JobCompletion>* writer) override;
  grpc::Status SubmitStore(grpc::ServerContext* ctx, const v1::SubmitStoreRequest* request,
                           v1::SubmitJobResponse* response) override;
  grpc::Status SubmitLoad(grpc::ServerContext* ctx, const v1::SubmitLoadRequest* request,
                          v1::SubmitJobResponse* response) override;
  grpc::Status PollEvents(grpc::ServerContext* ctx, const v1::PollEventsRequest* request,
                          v1::PollEventsResponse* response) override;

 private:
  // Finishes a callback call with `status` on the context's default reactor.
  static grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, grpc::Status status);

  ServiceContext context_;
  MessagePool<v1::LookupRequest, v1::LookupResponse> lookup_pool_;
  MessagePool<v1::ReserveStoreRequest, v1::ReserveStoreResponse> reserve_pool_;
  MessagePool<v1::CommitStoreRequest, v1::CommitStoreResponse> commit_pool_;
  MessagePool<v1::AcquireLoadRequest, v1::AcquireLoadResponse> acquire_pool_;
  MessagePool<v1::ReleaseLoadRequest, v1::ReleaseLoadResponse> release_pool_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_CONTROL_SERVICE_H_
