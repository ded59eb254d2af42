// kvstrata.v1.Admin: status, configuration, namespaces and sessions (admin_service.cc),
// statistics and block administration on the cache (admin_service_cache.cc), for
// operators and the `kvstrata` CLI. Thread-safe.
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
  grpc::Status GetStats(grpc::ServerContext* ctx, const v1::GetStatsRequest* request,
                        v1::GetStatsResponse* response) override;
  grpc::Status AdminLookup(grpc::ServerContext* ctx, const v1::AdminLookupRequest* request,
                           v1::AdminLookupResponse* response) override;
  grpc::Status Evict(grpc::ServerContext* ctx, const v1::EvictRequest* request,
                     v1::EvictResponse* response) override;
  grpc::Status Clear(grpc::ServerContext* ctx, const v1::ClearRequest* request,
                     grpc::ServerWriter<v1::Progress>* writer) override;
  grpc::Status Pin(grpc::ServerContext* ctx, const v1::PinRequest* request,
                   v1::PinResponse* response) override;
  grpc::Status Unpin(grpc::ServerContext* ctx, const v1::PinRequest* request,
                     v1::PinResponse* response) override;
  grpc::Status Drain(grpc::ServerContext* ctx, const v1::DrainRequest* request,
                     grpc::ServerWriter<v1::Progress>* writer) override;
  grpc::Status GetConfig(grpc::ServerContext* ctx, const v1::GetConfigRequest* request,
                         v1::GetConfigResponse* response) override;

 private:
  void FillTiers(google::protobuf::RepeatedPtrField<v1::TierInfo>* tiers) const;
  grpc::Status PinOrUnpin(absl::string_view method, grpc::ServerContext* ctx,
                          const v1::PinRequest& request, v1::PinResponse* response, bool pin);

  ServiceContext context_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_ADMIN_SERVICE_H_
