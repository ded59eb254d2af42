#include "daemon/server/lookup_server.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/server/unix_listener.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

constexpr size_t kReadChunk = 64 << 10;
constexpr int kWaitMs = 100;  // how often a loop looks at Stop and at stalled frames

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

// Sends what it can of `bytes` without blocking; false when the peer is gone.
bool SendSome(int fd, const std::string& bytes, size_t* sent) {
  while (*sent < bytes.size()) {
    ssize_t n = send(fd, bytes.data() + *sent, bytes.size() - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}

}  // namespace

// One admitted connection. The loop that serves it owns everything but `mu`, `fd`, `closed`
// (the accept thread may shut it down to evict it) and the atomics.
struct LookupServer::Connection {
  Connection(int socket, TenantId owner) : tenant(owner), fd(socket) {}

  const TenantId tenant;
  std::mutex mu;
  int fd;                                 // by mu once served; closed only by its loop
  bool closed = false;                    // by mu
  std::atomic<bool> done{false};          // closed: the accept thread may forget it
  std::atomic<int64_t> idle_since_ms{0};  // waiting for a frame since; 0 while busy
  // The loop's own:
  std::string in;   // bytes received, not yet answered
  std::string out;  // responses not yet sent (from out_sent on)
  size_t out_sent = 0;
  bool close_after_out = false;
  bool watching_out = false;     // epoll waits for writability (responses pending), not input
  int64_t last_progress_ms = 0;  // the last byte read or written
  LookupFrames::Scratch scratch;

  bool busy() const { return !in.empty() || out_sent < out.size(); }
};

// One event loop: an epoll set of connections and the thread that serves them.
class LookupServer::Loop {
 public:
  Loop(const LookupFrames& frames, const std::atomic<bool>& stop) : frames_(frames), stop_(stop) {}
  ~Loop() {
    if (thread_.joinable()) thread_.join();
    if (epoll_fd_ >= 0) close(epoll_fd_);
  }

  absl::Status Start() {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return absl::InternalError(absl::StrCat("epoll_create1: errno ", errno));
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  // Serves `c` from now on (any thread). False when it cannot be watched.
  bool Add(std::shared_ptr<Connection> c) {
    c->idle_since_ms.store(NowMs());
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = c.get();
    std::lock_guard<std::mutex> lock(mu_);
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev) != 0) return false;
    connections_.emplace(c.get(), std::move(c));
    return true;
  }

 private:
  void Run() {
    epoll_event events[64];
    int64_t last_scan = NowMs();
    while (!stop_.load()) {
      int n = epoll_wait(epoll_fd_, events, 64, kWaitMs);
      for (int i = 0; i < n; ++i) {
        auto* c = static_cast<Connection*>(events[i].data.ptr);
        if (c->done.load()) continue;  // Closed by an earlier event of this batch.
        if (events[i].events & EPOLLOUT) {
          Flush(*c);
        } else {
          OnReadable(*c, (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
        }
      }
      if (NowMs() - last_scan >= 1000) {
        last_scan = NowMs();
        DropStalled();
      }
      closed_.clear();  // Closed connections are freed here, between batches.
    }
    std::vector<Connection*> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [raw, c] : connections_) all.push_back(raw);
    }
    for (Connection* c : all) Close(*c);
    closed_.clear();
  }

  // Edge-triggered: reads what has come. A short read means nothing more is there now
  // (more data would raise a new edge), unless the peer's end came with this edge
  // (`peer_closed`): then it reads on to the end of the stream.
  void OnReadable(Connection& c, bool peer_closed) {
    char chunk[kReadChunk];
    bool end = false;
    for (;;) {
      ssize_t n = read(c.fd, chunk, sizeof(chunk));
      if (n > 0) {
        c.in.append(chunk, static_cast<size_t>(n));
        c.last_progress_ms = NowMs();
        c.idle_since_ms.store(0);
        if (static_cast<size_t>(n) < sizeof(chunk) && !peer_closed) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) {
        Close(c);  // A socket error: nothing more can be sent either.
        return;
      }
      end = true;  // The peer closed (or half-closed) it, or an eviction shut it down.
      break;
    }
    AnswerWholeFrames(c);
    if (end && !c.done.load()) {
      c.close_after_out = true;  // Once the answers to what came before the end are sent.
      Flush(c);
    }
  }

  // Answers every whole frame received (pipelined ones too), then sends the responses.
  void AnswerWholeFrames(Connection& c) {
    size_t at = 0;
    while (!c.close_after_out) {
      const std::string_view rest(c.in.data() + at, c.in.size() - at);
      const size_t bytes = frames_.FrameBytes(rest);
      if (bytes == 0 || rest.size() < bytes) break;
      if (!frames_.Answer(c.tenant, rest.substr(0, bytes), c.scratch, &c.out)) {
        c.close_after_out = true;
      }
      at += bytes;
    }
    c.in.erase(0, at);
    Flush(c);
  }

  // Sends pending responses without blocking. While some remain the connection is
  // watched for writability only (a client that does not read its responses is not read
  // from either); once they are sent, for readability again.
  void Flush(Connection& c) {
    if (c.out_sent < c.out.size()) {
      const size_t before = c.out_sent;
      if (!SendSome(c.fd, c.out, &c.out_sent)) {
        Close(c);
        return;
      }
      if (c.out_sent > before) c.last_progress_ms = NowMs();
    }
    const bool pending = c.out_sent < c.out.size();
    if (!pending) {
      c.out.clear();
      c.out_sent = 0;
      if (c.close_after_out) {
        Close(c);
        return;
      }
      if (c.in.empty()) c.idle_since_ms.store(NowMs());
    }
    if (pending != c.watching_out) {
      c.watching_out = pending;
      epoll_event ev{};
      ev.events = EPOLLET | (pending ? EPOLLOUT : EPOLLIN | EPOLLRDHUP);
      ev.data.ptr = &c;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
    }
  }

  // A frame that started, or a response not taken, without progress for the frame timeout.
  void DropStalled() {
    std::vector<Connection*> stalled;
    const int64_t now = NowMs();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [raw, c] : connections_) {
        if (c->busy() && now - c->last_progress_ms >= int64_t{kFrameTimeoutSeconds} * 1000) {
          stalled.push_back(raw);
        }
      }
    }
    for (Connection* c : stalled) Close(*c);
  }

  void Close(Connection& c) {
    if (c.done.load()) return;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
      close(c.fd);
      c.closed = true;
    }
    c.done.store(true);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = connections_.find(&c);
    if (it == connections_.end()) return;
    closed_.push_back(std::move(it->second));  // Kept alive until the batch is over.
    connections_.erase(it);
  }

  const LookupFrames& frames_;
  const std::atomic<bool>& stop_;
  int epoll_fd_ = -1;
  std::mutex mu_;
  absl::flat_hash_map<Connection*, std::shared_ptr<Connection>> connections_;  // by mu_
  std::vector<std::shared_ptr<Connection>> closed_;                            // the loop thread's
  std::thread thread_;
};

absl::StatusOr<std::unique_ptr<LookupServer>> LookupServer::Start(const std::string& path,
                                                                  uint32_t mode,
                                                                  ServiceContext context,
                                                                  MetricsSink* metrics) {
  absl::StatusOr<int> fd = ListenUnix(path, mode);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<LookupServer> server(new LookupServer(path, *fd, std::move(context), metrics));
  const size_t cpus = std::max(1u, std::thread::hardware_concurrency());
  const size_t loops = std::clamp<size_t>(cpus, 1, kLoops);
  for (size_t i = 0; i < loops; ++i) {
    server->loops_.push_back(std::make_unique<Loop>(server->frames_, server->stop_));
    if (absl::Status s = server->loops_.back()->Start(); !s.ok()) return s;
  }
  server->accept_thread_ = std::thread([raw = server.get()] { raw->AcceptLoop(); });
  return server;
}

LookupServer::LookupServer(std::string path, int listen_fd, ServiceContext context,
                           MetricsSink* metrics)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      context_(std::move(context)),
      metrics_(metrics),
      frames_(context_, metrics_) {}

LookupServer::~LookupServer() { Stop(); }

void LookupServer::Stop() {
  if (stop_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  for (auto& loop : loops_) loop->Join();  // Each closes its connections as it ends.
  close(listen_fd_);
  unlink(path_.c_str());
}

void LookupServer::AcceptLoop() {
  while (!stop_.load()) {
    pollfd waiting{listen_fd_, POLLIN, 0};
    if (poll(&waiting, 1, kWaitMs) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) Admit(fd);
  }
}

bool LookupServer::EvictIdlest() {
  const int64_t now = NowMs();
  Connection* idlest = nullptr;
  int64_t oldest = now - 1000;  // idle at least 1 s
  for (const auto& c : open_) {
    const int64_t since = c->idle_since_ms.load();
    if (!c->done.load() && since > 0 && since <= oldest) {
      oldest = since;
      idlest = c.get();
    }
  }
  if (idlest == nullptr) return false;
  std::lock_guard<std::mutex> lock(idlest->mu);
  if (!idlest->closed) shutdown(idlest->fd, SHUT_RDWR);  // Its loop sees the end and closes it.
  idlest->idle_since_ms.store(0);
  return true;
}

void LookupServer::Admit(int fd) {
  std::erase_if(open_, [](const auto& c) { return c->done.load(); });
  auto refuse = [&](const absl::Status& status) {
    spdlog::warn("lookup_socket_refused reason=\"{}\"", std::string(status.message()));
    const std::string frame = LookupFrames::ErrorFrame(status);
    (void)send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
  };
  // Full: make room by closing the connection idle the longest (at least 1 s), so idle
  // connections cannot lock new callers out; refuse only when every one is busy.
  if (open_.size() >= kMaxConnections && !EvictIdlest()) {
    refuse(absl::ResourceExhaustedError(
        absl::StrCat("the lookup socket serves at most ", kMaxConnections, " connections")));
    return;
  }
  absl::StatusOr<Caller> caller = context_.tenants->ForConnection(fd);
  if (!caller.ok()) {
    refuse(caller.status());
    return;
  }
  auto connection = std::make_shared<Connection>(fd, caller->tenant);
  Loop& loop = *loops_[next_loop_++ % loops_.size()];
  if (!loop.Add(connection)) {
    close(fd);
    return;
  }
  open_.push_back(std::move(connection));
}

}  // namespace kvstrata
