// The `kvstrata` subcommands. Each prints a human table (or JSON with --json) to stdout
// and returns the process exit code: 0 success, 2 daemon unreachable, 3 the daemon
// answered an error. Errors are one line on stderr.
#ifndef KVSTRATA_CLIENT_CLI_COMMANDS_H_
#define KVSTRATA_CLIENT_CLI_COMMANDS_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/cpp/kvstrata_client.h"

namespace kvstrata {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitUnavailable = 2;
inline constexpr int kExitError = 3;

struct CommandContext {
  Client* client;
  bool json;
  bool toml;                                   // `config --toml`: the effective TOML document.
  std::vector<std::string> args;               // After the command name.
  std::string tier;                            // --tier: "", "l1", "l2" or "l3".
  absl::Duration interval = absl::Seconds(2);  // `top`: time between frames.
  int64_t iterations = 0;                      // `top`: frames to print, 0 = forever.
};

struct Command {
  std::string summary;
  std::function<int(CommandContext&)> run;
};

// Every subcommand by name.
const std::map<std::string, Command>& Commands();

// Adds the commands on cached blocks (commands_cache.cc).
void AddCacheCommands(std::map<std::string, Command>& commands);

// Adds `top`, the live view (top.cc).
void AddTopCommand(std::map<std::string, Command>& commands);

}  // namespace kvstrata

#endif  // KVSTRATA_CLIENT_CLI_COMMANDS_H_
