// C++ client for kvstratad: a channel to its Unix socket (or TCP with token/TLS) and one
// typed call helper that applies the deadline and credentials and returns absl::StatusOr.
// An unreachable daemon is UNAVAILABLE with a message naming the endpoint.
// Thread-safe (gRPC stubs are).
#ifndef KVSTRATA_CLIENT_CPP_KVSTRATA_CLIENT_H_
#define KVSTRATA_CLIENT_CPP_KVSTRATA_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kvstrata/v1/admin.grpc.pb.h"
#include "kvstrata/v1/control.grpc.pb.h"

namespace kvstrata {

struct ClientOptions {
  std::string endpoint;            // Socket path, unix:///path or host:port; "" = default socket.
  std::string token;               // Bearer token for TCP.
  std::string tls_root_cert_file;  // PEM roots: TLS on TCP when set.
  absl::Duration timeout = absl::Seconds(5);
};

class Client {
 public:
  // INVALID_ARGUMENT when the TLS root file cannot be read. Does not connect yet.
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);

  v1::Control::Stub& control() { return *control_; }
  v1::Admin::Stub& admin() { return *admin_; }
  const std::string& endpoint() const { return endpoint_; }

  // Unary call: client.Call(&v1::Admin::Stub::GetStatus, client.admin(), request).
  template <typename Stub, typename Request, typename Response>
  absl::StatusOr<Response> Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                             Response*),
                                Stub& stub, const Request& request) {
    grpc::ClientContext context;
    Prepare(context);
    Response response;
    grpc::Status status = (stub.*method)(&context, request, &response);
    if (!status.ok()) return ToAbsl(status);
    return response;
  }

  // Sets the deadline and the token on a context for streaming calls.
  void Prepare(grpc::ClientContext& context) const;
  absl::Status ToAbsl(const grpc::Status& status) const;

 private:
  Client(ClientOptions options, std::string endpoint, std::shared_ptr<grpc::Channel> channel);

  ClientOptions options_;
  std::string endpoint_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Control::Stub> control_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_CLIENT_CPP_KVSTRATA_CLIENT_H_
