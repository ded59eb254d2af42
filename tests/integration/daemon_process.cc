#include "tests/integration/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace kvstrata::testing {
namespace {

pid_t Spawn(const std::vector<std::string>& args, const std::string& log_path) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  dup2(fd, 1);
  dup2(fd, 2);
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(127);
}

int WaitExit(pid_t pid, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

std::string DaemonProcess::BinaryPath() {
  const char* env = std::getenv("KVSTRATA_DAEMON");
  return env != nullptr ? env : KVSTRATA_DAEMON_PATH;
}

DaemonProcess::DaemonProcess(std::vector<std::string> extra_flags) {
  char pattern[] = "/tmp/kvstrata-it-XXXXXX";
  dir_ = mkdtemp(pattern);
  socket_ = dir_ + "/kvstrata.sock";
  // One --set holds the small defaults and every --set of `extra_flags` after them: a
  // repeated --set flag would replace the earlier one (the last wins), and the daemon would
  // then run the embedded 4 GiB L1 with L2 in the home directory.
  std::string set = "--set=l1.capacity=64MiB,l1.slab_size=4MiB,l2.enabled=false";
  flags_ = {BinaryPath(), "--socket=" + socket_, "--metrics_address=off"};
  for (const std::string& flag : extra_flags) {
    if (flag.rfind("--socket=", 0) == 0) socket_ = flag.substr(9);  // The last one wins.
    if (flag.rfind("--set=", 0) == 0) {
      set += "," + flag.substr(6);
    } else {
      flags_.push_back(flag);
    }
  }
  flags_.push_back(set);
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) Kill();
  RunCommand("rm -rf " + dir_);
}

absl::Status DaemonProcess::Start() {
  pid_ = Spawn(flags_, dir_ + "/daemon.log");
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    struct stat info {};
    bool listening = stat(socket_.c_str(), &info) == 0 && S_ISSOCK(info.st_mode);
    ClientOptions options;
    options.endpoint = socket_;
    options.timeout = absl::Milliseconds(500);
    std::unique_ptr<Client> client = *Client::Create(options);  // Fresh: no reconnect backoff.
    if (listening &&
        client->Call(&v1::Admin::Stub::GetStatus, client->admin(), v1::GetStatusRequest()).ok()) {
      return absl::OkStatus();
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("kvstratad exited at start: ", log()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("kvstratad did not answer: ", log()));
}

int DaemonProcess::Stop(int signal_number) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal_number);
  int code = WaitExit(pid_, absl::Seconds(30));
  pid_ = -1;
  return code;
}

int DaemonProcess::Kill() { return Stop(SIGKILL); }

std::string DaemonProcess::log() const { return ReadFile(dir_ + "/daemon.log"); }

std::unique_ptr<Client> DaemonProcess::NewClient() const {
  ClientOptions options;
  options.endpoint = socket_;
  return *std::move(Client::Create(options));
}

ExitResult DaemonProcess::RunToExit(const std::vector<std::string>& flags) {
  char pattern[] = "/tmp/kvstrata-run-XXXXXX";
  std::string log_path = std::string(mkdtemp(pattern)) + "/out.log";
  std::vector<std::string> args = {BinaryPath()};
  args.insert(args.end(), flags.begin(), flags.end());
  int code = WaitExit(Spawn(args, log_path), absl::Seconds(20));
  return {code, ReadFile(log_path)};
}

ExitResult RunCommand(const std::string& command) {
  ExitResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace kvstrata::testing
