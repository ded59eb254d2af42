// The HTTP server of the /metrics page: one thread on epoll with non-blocking sockets, so an
// idle connection (a port scan, a stuck client, a scraper's keep-alive between scrapes)
// costs one file descriptor and never delays a scrape. (prometheus-cpp's CivetWeb server gave
// every connection a worker thread until its request came: 16 idle connections held up each
// scrape for its 2 s request timeout, issue 46.)
//
// HTTP/1.0 and 1.1, keep-alive and pipelined requests; GET and HEAD. `/metrics` (any query
// string) answers 200 with render()'s text; another path 404, another method 405, a malformed
// or oversized request 400 and the connection is closed. At most max_connections are open:
// one more closes the connection idle longest. A connection with nothing received or sent
// for idle_timeout is closed. render() runs on the server's thread, one request at a time.
// Start and the destructor belong to one thread; the counters may be read from any.
#ifndef KVSTRATA_DAEMON_METRICS_METRICS_HTTP_SERVER_H_
#define KVSTRATA_DAEMON_METRICS_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvstrata {

struct MetricsHttpOptions {
  std::string address;  // "host:port" or "[v6]:port"; port 0 picks a free port.
  size_t max_connections = 4096;
  absl::Duration idle_timeout = absl::Minutes(5);
  size_t max_request_bytes = 16 << 10;  // the request line and headers
};

class MetricsHttpServer {
 public:
  // Binds and starts serving. UNAVAILABLE when the address cannot be resolved or bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      MetricsHttpOptions options, std::function<std::string()> render);
  ~MetricsHttpServer();  // Stops the thread and closes every connection.

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  size_t open_connections() const { return open_.load(std::memory_order_relaxed); }
  uint64_t pages_served() const { return served_.load(std::memory_order_relaxed); }

 private:
  struct Loop;
  MetricsHttpServer(std::unique_ptr<Loop> loop, int port);

  std::unique_ptr<Loop> loop_;
  int port_ = 0;
  std::atomic<size_t> open_{0};
  std::atomic<uint64_t> served_{0};
  std::thread thread_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_METRICS_METRICS_HTTP_SERVER_H_
