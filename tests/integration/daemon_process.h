// Runs a real kvstratad process for a test: a fresh temporary directory, a socket in it,
// metrics on a free port, extra flags as given. Start() waits until the daemon answers
// GetStatus; Stop() sends SIGTERM and returns the exit code. The destructor kills a
// daemon still running. Not thread-safe.
#ifndef KVSTRATA_TESTS_INTEGRATION_DAEMON_PROCESS_H_
#define KVSTRATA_TESTS_INTEGRATION_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cpp/kvstrata_client.h"

namespace kvstrata::testing {

// Result of running the daemon binary to completion (bad-config tests).
struct ExitResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr.
};

class DaemonProcess {
 public:
  explicit DaemonProcess(std::vector<std::string> extra_flags = {});
  ~DaemonProcess();

  absl::Status Start();
  int Stop(int signal_number = 15);  // Returns the exit code, or 128 + signal.
  int Kill();                        // SIGKILL.

  const std::string& dir() const { return dir_; }
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  std::string log() const;  // What the daemon wrote so far.
  std::unique_ptr<Client> NewClient() const;

  // Runs kvstratad with `flags` (no defaults added) to completion, max 20 s.
  static ExitResult RunToExit(const std::vector<std::string>& flags);
  static std::string BinaryPath();

 private:
  std::vector<std::string> flags_;
  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
};

// Runs a command line through the shell, returning its exit code and output.
ExitResult RunCommand(const std::string& command);

}  // namespace kvstrata::testing

#endif  // KVSTRATA_TESTS_INTEGRATION_DAEMON_PROCESS_H_
