// kvstrata: the KVStrata admin CLI. `kvstrata help` lists the commands.
#include <fstream>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "client/cli/commands.h"
#include "client/cli/output.h"
#include "daemon/common/program_usage.h"
#include "daemon/common/runtime_paths.h"
#include "daemon/common/version.h"

ABSL_FLAG(std::string, endpoint, "",
          "Daemon endpoint: socket path, unix:///path or host:port (default: the default socket, "
          "or $KVSTRATA_SOCKET)");
ABSL_FLAG(bool, json, false, "Print JSON instead of tables");
ABSL_FLAG(bool, toml, false, "config: print the effective configuration as TOML");
ABSL_FLAG(std::string, token_file, "", "File holding the bearer token (TCP endpoints)");
ABSL_FLAG(std::string, tls_ca, "", "PEM root certificates: use TLS (TCP endpoints)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10),
          "Deadline of each call, e.g. 10s; 0 = none (for a long drain)");
ABSL_FLAG(std::string, tier, "",
          "evict/clear: only this tier (l1, l2, l3; default all); drain: the target (l2, l3; "
          "default every lower tier)");
ABSL_FLAG(absl::Duration, interval, absl::Seconds(2), "top: time between frames");
ABSL_FLAG(int64_t, iterations, 0, "top: frames to print, then exit (0 = until interrupted)");

namespace {

// What the program does, its commands and exit codes (--help adds the flags).
std::string UsageText() {
  std::string text =
      "the admin CLI of kvstratad, the KVStrata KV-cache daemon.\n\n"
      "usage: kvstrata [flags] <command> [args]   (kvstrata --help lists the flags)\n\n"
      "commands:\n";
  for (const auto& [name, command] : kvstrata::Commands()) {
    text += "  " + name + std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') +
            command.summary + "\n";
  }
  text +=
      "  version     print the CLI version\n\nexit codes: 0 ok, 1 usage, "
      "2 daemon unreachable, 3 daemon answered an error";
  return text;
}

int Usage(const std::string& problem = "") {
  if (!problem.empty()) std::cerr << "kvstrata: " << problem << "\n\n";
  std::cerr << "kvstrata: " << UsageText() << "\n";
  return kvstrata::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  kvstrata::SetProgramUsage(UsageText());
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) return Usage("no command given");
  std::string name = positional[1];
  if (name == "version") {
    if (absl::GetFlag(FLAGS_json)) {
      std::cout << "{\"version\": \"" << kvstrata::kVersion << "\"}\n";
    } else {
      std::cout << "kvstrata " << kvstrata::kVersion << "\n";
    }
    return kvstrata::kExitOk;
  }
  auto command = kvstrata::Commands().find(name);
  if (command == kvstrata::Commands().end()) return Usage("unknown command '" + name + "'");
  kvstrata::ClientOptions options;
  options.endpoint = absl::GetFlag(FLAGS_endpoint);
  options.tls_root_cert_file = absl::GetFlag(FLAGS_tls_ca);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  if (std::string file = absl::GetFlag(FLAGS_token_file); !file.empty()) {
    std::ifstream in(file);
    std::getline(in, options.token);
  }
  auto client = kvstrata::Client::Create(options);
  if (!client.ok()) return kvstrata::PrintError(client.status());
  kvstrata::CommandContext context{client->get(),
                                   absl::GetFlag(FLAGS_json),
                                   absl::GetFlag(FLAGS_toml),
                                   {positional.begin() + 2, positional.end()},
                                   absl::GetFlag(FLAGS_tier),
                                   absl::GetFlag(FLAGS_interval),
                                   absl::GetFlag(FLAGS_iterations)};
  return command->second.run(context);
}
