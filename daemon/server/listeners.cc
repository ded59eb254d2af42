#include "daemon/server/listeners.h"

#include <grpcpp/security/server_credentials.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/secret_file.h"

namespace kvstrata {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(
    const ServerConfig& config) {
  if (config.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadSecretFile(config.tls_cert_file, "server.tls_cert_file");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadSecretFile(config.tls_key_file, "server.tls_key_file");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace

absl::StatusOr<std::vector<ListenerInfo>> AddListeners(const Config& config, bool with_unix,
                                                       grpc::ServerBuilder& builder,
                                                       int* unix_bound) {
  const ServerConfig& server = config.server;
  std::vector<ListenerInfo> listeners;
  if (with_unix) {
    builder.AddListeningPort(absl::StrCat("unix:", server.socket),
                             grpc::InsecureServerCredentials(), unix_bound);
  }
  listeners.push_back({"unix", server.socket, false, false});
  if (server.tcp_address.empty()) return listeners;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = TcpCredentials(server);
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(server.tcp_address, *credentials);
  bool token = !server.auth_token_file.empty() ||
               std::any_of(config.tenants.begin(), config.tenants.end(),
                           [](const TenantConfig& t) { return !t.token_file.empty(); });
  listeners.push_back({"tcp", server.tcp_address, !server.tls_cert_file.empty(), token});
  return listeners;
}

}  // namespace kvstrata
