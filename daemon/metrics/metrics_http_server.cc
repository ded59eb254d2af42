#include "daemon/metrics/metrics_http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <unordered_map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace kvstrata {
namespace {

using Clock = std::chrono::steady_clock;

struct Connection {
  std::string in;   // received, not yet answered
  std::string out;  // answers not yet sent, from out_sent on
  size_t out_sent = 0;
  bool close_after = false;  // close once `out` is sent
  Clock::time_point last_active;
};

struct Request {
  int status = 400;        // 200, 400, 404 or 405
  bool head_only = false;  // HEAD: the headers without the page
  bool keep_alive = false;
};

// The request whose line and headers are `head` (without the blank line).
Request ParseRequest(absl::string_view head) {
  Request r;
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  std::vector<absl::string_view> first = absl::StrSplit(lines[0], ' ');
  if (first.size() != 3 || !absl::StartsWith(first[2], "HTTP/1.")) return r;
  bool close = false, keep = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) return r;
    std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    std::string value =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    if (name == "connection") {
      close = close || absl::StrContains(value, "close");
      keep = keep || absl::StrContains(value, "keep-alive");
    } else if ((name == "content-length" && value != "0") || name == "transfer-encoding") {
      return r;  // A request with a body: not one of ours.
    }
  }
  r.keep_alive = first[2] == "HTTP/1.0" ? keep && !close : !close;
  absl::string_view path = first[1].substr(0, first[1].find('?'));
  r.head_only = first[0] == "HEAD";
  r.status = first[0] != "GET" && !r.head_only ? 405 : path == "/metrics" ? 200 : 404;
  return r;
}

std::string Response(const Request& r, const std::string& page) {
  const char* reason = r.status == 200   ? "OK"
                       : r.status == 404 ? "Not Found"
                       : r.status == 405 ? "Method Not Allowed"
                       : r.status == 500 ? "Internal Server Error"
                                         : "Bad Request";
  const char* type = r.status == 200 ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain";
  std::string body = r.status == 200 ? page : absl::StrCat(r.status, " ", reason, "\n");
  std::string text = absl::StrCat(
      "HTTP/1.1 ", r.status, " ", reason, "\r\nContent-Type: ", type,
      "\r\nContent-Length: ", body.size(), "\r\n", r.status == 405 ? "Allow: GET, HEAD\r\n" : "",
      "Connection: ", r.keep_alive ? "keep-alive" : "close", "\r\n\r\n");
  if (!r.head_only) text += body;
  return text;
}

// A listening socket on `address` ("host:port", "[v6]:port"), or the reason there is none.
absl::StatusOr<int> Listen(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError("expected host:port");
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(gai_strerror(rc));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int on = 1;
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
                    bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0)) {
      error = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(error);
  return fd;
}

}  // namespace

struct MetricsHttpServer::Loop {
  MetricsHttpOptions options;
  std::function<std::string()> render;
  std::atomic<size_t>* open = nullptr;
  std::atomic<uint64_t>* served = nullptr;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  bool accepting = true;
  Clock::time_point resume_accepting, next_sweep;
  std::unordered_map<int, Connection> connections;

  ~Loop() {
    for (auto& [fd, c] : connections) close(fd);
    for (int fd : {listen_fd, epoll_fd, wake_fd}) {
      if (fd >= 0) close(fd);
    }
  }

  void Watch(int fd, uint32_t events, int op) {
    epoll_event e{};
    e.events = events;
    e.data.fd = fd;
    epoll_ctl(epoll_fd, op, fd, &e);
  }

  void Run() {
    epoll_event events[256];
    while (true) {
      int n = epoll_wait(epoll_fd, events, 256, 200);
      Clock::time_point now = Clock::now();
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == wake_fd) return;
        if (fd == listen_fd) {
          Accept(now);
        } else if (events[i].events & (EPOLLERR | EPOLLHUP)) {
          Close(fd);
        } else {
          Serve(fd, now);
        }
      }
      if (!accepting && now >= resume_accepting) {
        accepting = true;
        Watch(listen_fd, EPOLLIN, EPOLL_CTL_ADD);
      }
      if (now >= next_sweep) Sweep(now);
    }
  }

  void Accept(Clock::time_point now) {
    while (true) {
      if (connections.size() >= options.max_connections && !CloseIdlest()) return Pause(now);
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors: make room by closing the connection idle longest.
        if ((errno == EMFILE || errno == ENFILE) && CloseIdlest()) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) Pause(now);
        return;
      }
      connections[fd].last_active = now;
      open->store(connections.size(), std::memory_order_relaxed);
      Watch(fd, EPOLLIN, EPOLL_CTL_ADD);
    }
  }

  // Stops accepting for a moment (nothing to close, descriptors exhausted): no busy loop.
  void Pause(Clock::time_point now) {
    if (!accepting) return;
    accepting = false;
    resume_accepting = now + std::chrono::milliseconds(100);
    Watch(listen_fd, 0, EPOLL_CTL_DEL);
  }

  void Close(int fd) {
    close(fd);  // also leaves the epoll set
    connections.erase(fd);
    open->store(connections.size(), std::memory_order_relaxed);
  }

  // Closes the connection idle longest, none with an answer still being sent; false if none.
  bool CloseIdlest() {
    int idlest = -1;
    Clock::time_point oldest = Clock::time_point::max();
    for (const auto& [fd, c] : connections) {
      if (c.out.empty() && c.last_active < oldest) oldest = c.last_active, idlest = fd;
    }
    if (idlest < 0) return false;
    Close(idlest);
    return true;
  }

  void Sweep(Clock::time_point now) {
    next_sweep = now + std::chrono::seconds(1);
    auto limit = std::chrono::duration_cast<Clock::duration>(
        absl::ToChronoNanoseconds(options.idle_timeout));
    std::vector<int> idle;
    for (const auto& [fd, c] : connections) {
      if (now - c.last_active > limit) idle.push_back(fd);
    }
    for (int fd : idle) Close(fd);
  }

  // Reads what came (unless an answer is still being sent), answers, sends.
  void Serve(int fd, Clock::time_point now) {
    Connection& c = connections[fd];
    c.last_active = now;
    if (c.out.empty()) {
      char buffer[4096];
      while (c.in.size() <= options.max_request_bytes) {
        ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          return Close(fd);  // The peer is gone (or closed its side: nothing more to answer).
        }
        if (got < 0) break;
        c.in.append(buffer, static_cast<size_t>(got));
      }
    }
    while (true) {
      if (!Send(fd, c)) return Close(fd);
      if (!c.out.empty()) return Watch(fd, EPOLLOUT, EPOLL_CTL_MOD);
      if (c.close_after) return Close(fd);
      if (!Answer(c)) break;
    }
    Watch(fd, EPOLLIN, EPOLL_CTL_MOD);
  }

  // Queues the answer to the first complete request in `c.in`; false when there is none.
  bool Answer(Connection& c) {
    size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos && c.in.size() <= options.max_request_bytes) return false;
    Request r;
    if (end != std::string::npos && end <= options.max_request_bytes) {
      r = ParseRequest(absl::string_view(c.in).substr(0, end));
    }
    std::string page;
    if (r.status == 200) {
      try {
        page = render();
        served->fetch_add(1, std::memory_order_relaxed);
      } catch (const std::exception&) {
        r.status = 500;
      }
    }
    c.out = Response(r, page);
    c.out_sent = 0;
    c.close_after = !r.keep_alive || r.status == 400;
    c.in.erase(0, end == std::string::npos ? c.in.size() : end + 4);
    return true;
  }

  // Sends what it can of `c.out`; false when the connection failed.
  static bool Send(int fd, Connection& c) {
    while (c.out_sent < c.out.size()) {
      ssize_t sent = send(fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
      if (sent < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.out_sent += static_cast<size_t>(sent);
    }
    c.out.clear();
    c.out_sent = 0;
    return true;
  }
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    MetricsHttpOptions options, std::function<std::string()> render) {
  auto loop = std::make_unique<Loop>();
  absl::StatusOr<int> fd = Listen(options.address);
  if (!fd.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on '", options.address, "': ", fd.status().message()));
  }
  loop->listen_fd = *fd;
  loop->options = std::move(options);
  loop->render = std::move(render);
  loop->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  loop->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (loop->epoll_fd < 0 || loop->wake_fd < 0) {
    return absl::UnavailableError(absl::StrCat("metrics server: ", std::strerror(errno)));
  }
  loop->Watch(loop->listen_fd, EPOLLIN, EPOLL_CTL_ADD);
  loop->Watch(loop->wake_fd, EPOLLIN, EPOLL_CTL_ADD);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(loop->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  int port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(loop), port));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Loop> loop, int port)
    : loop_(std::move(loop)), port_(port) {
  loop_->open = &open_;
  loop_->served = &served_;
  thread_ = std::thread([l = loop_.get()] { l->Run(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  uint64_t one = 1;
  ssize_t written = write(loop_->wake_fd, &one, sizeof(one));
  (void)written;
  if (thread_.joinable()) thread_.join();
}

}  // namespace kvstrata
