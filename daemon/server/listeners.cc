#include "daemon/server/listeners.h"

#include <grpcpp/security/server_credentials.h>

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvstrata {
namespace {

absl::StatusOr<std::string> ReadNonEmpty(const std::string& path, absl::string_view key) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) text.clear();
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key 'server.", key, "': '", path, "' is missing or empty"));
  }
  return text;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(
    const ServerConfig& config) {
  if (config.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadNonEmpty(config.tls_cert_file, "tls_cert_file");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadNonEmpty(config.tls_key_file, "tls_key_file");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace

absl::StatusOr<ListenerSetup> AddListeners(const ServerConfig& config,
                                           grpc::ServerBuilder& builder) {
  ListenerSetup setup;
  builder.AddListeningPort(absl::StrCat("unix:", config.socket), grpc::InsecureServerCredentials());
  setup.listeners.push_back({"unix", config.socket, false, false});
  if (config.tcp_address.empty()) return setup;
  if (!config.auth_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadNonEmpty(config.auth_token_file, "auth_token_file");
    if (!token.ok()) return token.status();
    setup.token = std::string(absl::StripAsciiWhitespace(*token));
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = TcpCredentials(config);
  if (!credentials.ok()) return credentials.status();
  builder.AddListeningPort(config.tcp_address, *credentials);
  setup.listeners.push_back(
      {"tcp", config.tcp_address, !config.tls_cert_file.empty(), !setup.token.empty()});
  return setup;
}

}  // namespace kvstrata
