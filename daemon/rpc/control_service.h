// kvstrata.v1.Control: translates gRPC calls into calls on the daemon core. Every request
// is validated before it reaches the core. Thread-safe (gRPC calls it from many threads).
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
  grpc::Status SubmitStore(grpc::ServerContext* ctx, const v1::SubmitStoreRequest* request,
                           v1::SubmitJobResponse* response) override;
  grpc::Status SubmitLoad(grpc::ServerContext* ctx, const v1::SubmitLoadRequest* request,
                          v1::SubmitJobResponse* response) override;

 private:
  ServiceContext context_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_CONTROL_SERVICE_H_
