#include "client/cpp/kvstrata_client.h"

#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "daemon/common/runtime_paths.h"

namespace kvstrata {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ClientOptions& options,
                                                                      const std::string& target) {
  if (absl::StartsWith(target, "unix:") || options.tls_root_cert_file.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  std::ifstream in(options.tls_root_cert_file);
  std::string roots((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (roots.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read TLS root certificates '", options.tls_root_cert_file, "'"));
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = roots;
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  std::string endpoint = options.endpoint.empty() ? DefaultSocketPath() : options.endpoint;
  std::string target = EndpointToTarget(endpoint);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      Credentials(options, target);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(target, *credentials, args);
  return std::unique_ptr<Client>(new Client(std::move(options), endpoint, std::move(channel)));
}

Client::Client(ClientOptions options, std::string endpoint, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      endpoint_(std::move(endpoint)),
      channel_(std::move(channel)),
      control_(v1::Control::NewStub(channel_)),
      admin_(v1::Admin::NewStub(channel_)) {}

void Client::Prepare(grpc::ClientContext& context) const {
  if (options_.timeout > absl::ZeroDuration()) {  // 0: no deadline (long drains)
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  }
  if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
}

absl::Status Client::ToAbsl(const grpc::Status& status) const {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach kvstratad at ", endpoint_, " (is the daemon running?)"));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace kvstrata
