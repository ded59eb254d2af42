// kvstrata.v1.Admin: status, configuration, namespaces and sessions for operators and the
// `kvstrata` CLI. Thread-safe.
#ifndef KVSTRATA_DAEMON_RPC_ADMIN_SERVICE_H_
#define KVSTRATA_DAEMON_RPC_ADMIN_SERVICE_H_

#include "daemon/rpc/service_context.h"
#include "kvstrata/v1/admin.grpc.pb.h"

namespace kvstrata {

class AdminService final : public v1::Admin::Service {
 public:
  explicit AdminService(ServiceContext context) : context_(context) {}

  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest* request,
                         v1::GetStatusResponse* response) override;
  grpc::Status ListTiers(grpc::ServerContext* ctx, const v1::ListTiersRequest* request,
                         v1::ListTiersResponse* response) override;
  grpc::Status ListNamespaces(grpc::ServerContext* ctx, const v1::ListNamespacesRequest* request,
                              v1::ListNamespacesResponse* response) override;
  grpc::Status ListSessions(grpc::ServerContext* ctx, const v1::ListSessionsRequest* request,
                            v1::ListSessionsResponse* response) override;
  grpc::Status GetConfig(grpc::ServerContext* ctx, const v1::GetConfigRequest* request,
                         v1::GetConfigResponse* response) override;

 private:
  void FillTiers(google::protobuf::RepeatedPtrField<v1::TierInfo>* tiers) const;

  ServiceContext context_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_ADMIN_SERVICE_H_
