// The lookup fast path: Lookup answered on a plain Unix stream socket beside the gRPC one
// (<socket>.lookup), in the binary frames of daemon/common/lookup_wire.h
// (docs/wire-protocol.md, "Lookup fast path"), on persistent connections; job frames
// (daemon/common/job_wire.h, magic "KVSJ") on the same connections (LookupFrames answers
// both).
//
// Threads: one accept thread, and a few event loops (epoll; one per CPU, kLoops at most)
// that each serve their share of the connections: read without blocking until a
// frame is whole, answer it on the loop's thread, write the response without blocking. So
// any number of connections costs no thread each, a slow or silent client holds no thread,
// and a call's own work (a lookup that probes a slow lower tier) delays only the other
// connections of its loop.
//
// A connection is admitted by its peer credentials (TenantTable::ForConnection: a peer no
// tenant claims gets a PERMISSION_DENIED frame and is closed); its frames may only name
// sessions of its tenant. At most kMaxConnections are open: a connection beyond that first
// closes the connection idle the longest, if one has waited at least 1 s for its next
// frame, and else gets a RESOURCE_EXHAUSTED frame and is closed, so idle clients cannot lock
// new ones out (an evicted client reconnects on its next call). An idle connection may
// otherwise wait any time for its next frame; a frame that has started must arrive whole
// within kFrameTimeoutSeconds and a response must be taken within it, else the connection
// is dropped. A header that cannot be trusted is answered with INVALID_ARGUMENT and the
// connection is closed; errors of the call leave it open.
//
// Thread-safe; Stop is idempotent and joins every thread. Everything the ServiceContext
// points to (and `metrics`) must outlive the server.
#ifndef KVSTRATA_DAEMON_SERVER_LOOKUP_SERVER_H_
#define KVSTRATA_DAEMON_SERVER_LOOKUP_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/rpc/service_context.h"
#include "daemon/server/lookup_frames.h"

namespace kvstrata {

class LookupServer {
 public:
  static constexpr size_t kMaxConnections = 256;
  static constexpr int kFrameTimeoutSeconds = 5;
  static constexpr size_t kLoops = 8;

  // Listens on `path` (a stale file there is replaced) with permissions `mode`.
  static absl::StatusOr<std::unique_ptr<LookupServer>> Start(const std::string& path, uint32_t mode,
                                                             ServiceContext context,
                                                             MetricsSink* metrics);
  ~LookupServer();
  void Stop();

 private:
  struct Connection;
  class Loop;

  LookupServer(std::string path, int listen_fd, ServiceContext context, MetricsSink* metrics);
  void AcceptLoop();
  void Admit(int fd);
  // Closes (shuts down) the open connection idle the longest, if one has been idle at
  // least 1 s; true when one was. Accept thread only.
  bool EvictIdlest();

  const std::string path_;
  const int listen_fd_;
  const ServiceContext context_;
  MetricsSink* const metrics_;
  const LookupFrames frames_;
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Loop>> loops_;
  size_t next_loop_ = 0;                           // accept thread only
  std::vector<std::shared_ptr<Connection>> open_;  // accept thread only: admitted, maybe closed
  std::thread accept_thread_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_LOOKUP_SERVER_H_
