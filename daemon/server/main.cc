// kvstratad: the KVStrata per-node KV-cache daemon.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/common/program_usage.h"
#include "daemon/common/version.h"
#include "daemon/config/config_loader.h"
#include "daemon/log/logging.h"
#include "daemon/server/daemon.h"
#include "daemon/transfer/cuda_process.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, config, "", "Config file (TOML); empty runs on the embedded default");
ABSL_FLAG(std::vector<std::string>, set, {},
          "Comma-separated overrides of config keys, e.g. --set=l1.capacity=8GiB,log.level=debug");
ABSL_FLAG(std::string, socket, "", "Unix socket path (overrides server.socket)");
ABSL_FLAG(std::string, tcp_address, "", "Also listen on host:port (overrides server.tcp_address)");
ABSL_FLAG(std::string, metrics_address, "",
          "Prometheus endpoint host:port (overrides server.metrics_address); 'off' disables");
ABSL_FLAG(std::string, log_level, "", "trace, debug, info, warn, error (overrides log.level)");
ABSL_FLAG(bool, print_default_config, false, "Print the embedded default config and exit");
ABSL_FLAG(bool, check_config, false, "Validate the configuration and exit");
ABSL_FLAG(bool, version, false, "Print the version and exit");

namespace kvstrata {
namespace {

std::vector<std::string> Overrides() {
  std::vector<std::string> overrides = absl::GetFlag(FLAGS_set);
  auto add = [&overrides](const char* key, const std::string& value) {
    if (!value.empty()) overrides.push_back(absl::StrCat(key, "=", value));
  };
  add("server.socket", absl::GetFlag(FLAGS_socket));
  add("server.tcp_address", absl::GetFlag(FLAGS_tcp_address));
  std::string metrics = absl::GetFlag(FLAGS_metrics_address);
  add("server.metrics_address", metrics == "off" ? "\"\"" : metrics);
  add("log.level", absl::GetFlag(FLAGS_log_level));
  return overrides;
}

int Fail(absl::string_view message) {
  std::fprintf(stderr, "kvstratad: %.*s\n", static_cast<int>(message.size()), message.data());
  return 2;
}

int Run() {
  absl::StatusOr<Config> config = LoadConfig(absl::GetFlag(FLAGS_config), Overrides());
  if (!config.ok()) return Fail(config.status().message());
  for (const std::string& warning : config->warnings) {
    std::fprintf(stderr, "kvstratad: warning: %s\n", warning.c_str());
  }
  if (absl::GetFlag(FLAGS_check_config)) {
    std::cout << "configuration is valid\n";
    return 0;
  }
  if (absl::Status s = InitLogging(config->log.level, config->log.format); !s.ok()) {
    return Fail(s.message());
  }
  // Signals are taken by sigwait below; every thread started from here on blocks them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::Duration grace = absl::Seconds(config->server.shutdown_timeout_seconds);
  spdlog::info("starting version={} config=\"{}\"", kVersion, config->config_path);
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(*std::move(config));
  if (!daemon.ok()) {
    spdlog::error("start_failed reason=\"{}\"", std::string(daemon.status().message()));
    return Fail(daemon.status().message());
  }
  spdlog::info("ready instance={} pid={}", (*daemon)->identity().instance_id,
               (*daemon)->identity().pid);
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("stopping signal={} grace_seconds={}", strsignal(signal_number),
               absl::ToInt64Seconds(grace));
  (*daemon)->Shutdown(grace);
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace kvstrata

int main(int argc, char** argv) {
  kvstrata::PrepareCudaProcess();  // Before any thread and any CUDA call.
  kvstrata::SetProgramUsage(
      "the KVStrata KV-cache daemon. It serves the KV blocks of the vLLM and SGLang\n"
      "engines of this node from a shared-memory L1, local-disk L2 and shared-filesystem L3,\n"
      "over gRPC on a Unix socket (docs/configuration.md, docs/wire-protocol.md).\n\n"
      "usage: kvstratad [--config=FILE] [--set=section.key=value,...] [flags]");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_version)) {
    std::cout << "kvstratad " << kvstrata::kVersion << "\n";
    return 0;
  }
  if (absl::GetFlag(FLAGS_print_default_config)) {
    std::cout << kvstrata::DefaultConfigToml();
    return 0;
  }
  return kvstrata::Run();
}
