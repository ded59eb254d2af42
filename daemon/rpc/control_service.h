// kvstrata.v1.Control: translates gRPC calls into calls on the daemon core. Every request
// is validated before it reaches the core. Sessions, namespaces and GPU jobs are in
// control_service.cc; lookup, leases and host-mode store/load in control_service_cache.cc.
// Thread-safe (gRPC calls it from many threads).
#ifndef KVSTRATA_DAEMON_RPC_CONTROL_SERVICE_H_
#define KVSTRATA_DAEMON_RPC_CONTROL_SERVICE_H_

#include "daemon/rpc/service_context.h"
#include "kvstrata/v1/control.grpc.pb.h"

namespace kvstrata {

class ControlService final : public v1::Control::Service {
 public:
  explicit ControlService(ServiceContext context) : context_(context) {}

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
  grpc::Status Lookup(grpc::ServerContext* ctx, const v1::LookupRequest* request,
                      v1::LookupResponse* response) override;
  grpc::Status ReserveStore(grpc::ServerContext* ctx, const v1::ReserveStoreRequest* request,
                            v1::ReserveStoreResponse* response) override;
  grpc::Status AcquireLoad(grpc::ServerContext* ctx, const v1::AcquireLoadRequest* request,
                           v1::AcquireLoadResponse* response) override;
  grpc::Status ReleaseLease(grpc::ServerContext* ctx, const v1::ReleaseLeaseRequest* request,
                            v1::ReleaseLeaseResponse* response) override;
  grpc::Status CommitStore(grpc::ServerContext* ctx, const v1::CommitStoreRequest* request,
                           v1::CommitStoreResponse* response) override;
  grpc::Status ReleaseLoad(grpc::ServerContext* ctx, const v1::ReleaseLoadRequest* request,
                           v1::ReleaseLoadResponse* response) override;
  grpc::Status UnregisterKvMemory(grpc::ServerContext* ctx,
                                  const v1::UnregisterKvMemoryRequest* request,
                                  v1::UnregisterKvMemoryResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status PollCompletions(grpc::ServerContext* ctx,
                               const v1::PollCompletionsRequest* request,
                               v1::PollCompletionsResponse* response) override;
  grpc::Status WatchCompletions(grpc::ServerContext* ctx,
                                const v1::WatchCompletionsRequest* request,
                                grpc::ServerWriter<v1::JobCompletion>* writer) override;
  grpc::Status SubmitStore(grpc::ServerContext* ctx, const v1::SubmitStoreRequest* request,
                           v1::SubmitJobResponse* response) override;
  grpc::Status SubmitLoad(grpc::ServerContext* ctx, const v1::SubmitLoadRequest* request,
                          v1::SubmitJobResponse* response) override;

 private:
  ServiceContext context_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_CONTROL_SERVICE_H_
