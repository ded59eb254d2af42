// FastPathServer: the fast path, the daemon's second transport beside gRPC
// (docs/wire-protocol.md, "The fast path"): binary frames on a plain Unix stream socket
// (<socket>.lookup, advertised as OpenSessionResponse.lookup_socket), persistent
// connections. Lookup frames (daemon/rpc/fast_path/lookup_wire.h, magic "KVSL") run
// RunLookup — the same checks and BlockCache::Lookup as Control.Lookup (a version-2 frame,
// several namespaces, RunLookups). Release frames ("KVSR") end a session's leases unused, as
// Control.ReleaseLease does. Job frames (daemon/rpc/fast_path/job_wire.h, magic "KVSJ") run
// RunSubmitJob, as Control.SubmitStore / Control.SubmitLoad do; a version-2 job frame's
// completion comes back on its connection (ConnectionWriter), where the client's reader
// already waits. Calls are counted as methods "FastPath.<call>".
//
// A connection is admitted by its peer credentials (TenantTable::ForConnection: a peer no
// tenant claims gets a PERMISSION_DENIED frame and is closed); its frames may only name
// sessions of its tenant. One accept thread and one thread per connection, at most
// kMaxConnections (a connection beyond that first closes the connection idle the longest, if
// one has waited at least 1 s for its next frame, and else gets a RESOURCE_EXHAUSTED frame
// and is closed), so a slow or silent client only ever holds its own thread and idle
// clients cannot lock new ones out (an evicted client reconnects on its next call). An idle
// connection may otherwise wait any time for its next frame;
// a frame that has started must arrive whole within kFrameTimeout and a response must be
// taken within kFrameTimeout, else the connection is dropped. A header that cannot be
// trusted (magic, version, flags, key count, key size) is answered with INVALID_ARGUMENT
// and the connection is closed; errors of the call leave it open.
//
// Thread-safe; Stop is idempotent and waits for every connection thread. Everything the
// ServiceContext points to (and `metrics`) must outlive the server.
#ifndef KVSTRATA_DAEMON_RPC_FAST_PATH_FAST_PATH_SERVER_H_
#define KVSTRATA_DAEMON_RPC_FAST_PATH_FAST_PATH_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/common/connection_threads.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/rpc/fast_path/connection_writer.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

class FastPathServer {
 public:
  // Idle and half-open connections each hold a thread (blocked, a few KiB resident): 1,024
  // of them leave room for a node's engines (issue 46: 1,000 idle or half-open
  // connections, lookups still under 100 ms).
  static constexpr size_t kMaxConnections = 1024;
  static constexpr int kFrameTimeoutSeconds = 5;
  // For kWarmWindow after a frame, a connection's thread waits for the next one in sleeps of
  // kWarmSleep (ppoll), not in one read(): an idle CPU then stays in a shallow sleep state,
  // and the next frame (an engine's next step) wakes the thread in microseconds, not the
  // 0.1-0.4 ms a thread that slept since the last frame can take
  // (bench/results/gpu-2026-11-26-fifteenth/NOTES.md, "Per-job fixed costs"). ~5,000 wake-ups
  // a second, on active connections only.
  static constexpr absl::Duration kWarmWindow = absl::Milliseconds(100);
  static constexpr absl::Duration kWarmSleep = absl::Microseconds(200);

  // Listens on `path` (a stale file there is replaced) with permissions `mode`.
  static absl::StatusOr<std::unique_ptr<FastPathServer>> Start(const std::string& path,
                                                               uint32_t mode,
                                                               ServiceContext context,
                                                               MetricsSink* metrics);
  ~FastPathServer();
  void Stop();

 private:
  FastPathServer(std::string path, int listen_fd, ServiceContext context, MetricsSink* metrics);
  void AcceptLoop();
  void Admit(int fd);
  struct FrameBuffers;  // Per connection, reused from frame to frame.
  // Serves frames until the peer closes, a frame is malformed or Stop is called.
  // Serves frames on `fd`, a connection of `tenant` (admitted by its peer credentials).
  // `idle_since_ms`: when it started waiting for a frame (0 while serving one).
  void Serve(int fd, TenantId tenant, std::atomic<int64_t>* idle_since_ms) const;
  // One job frame (its first kRequestHeaderBytes of lookup_wire already read); false when
  // the connection must close.
  // Its answer (and, for a version-2 frame, the job's completion) goes through `writer`.
  bool ServeJob(int fd, TenantId tenant, const char* first_bytes, FrameBuffers& buffers,
                const std::shared_ptr<ConnectionWriter>& writer) const;
  // Reads exactly `size` bytes. Before the first byte of a frame (`frame_start`) it waits
  // until Stop; after it, at most kFrameTimeoutSeconds without progress.
  // `idle_since_ms` (frame starts only) is set while no byte of the frame has come.
  // A release frame ("KVSR"; its first kRequestHeaderBytes already read): ends the leases
  // of the frame's session that are still live. False when the connection must close.
  bool ServeRelease(int fd, TenantId tenant, const char* first_bytes, FrameBuffers& buffers,
                    ConnectionWriter& writer) const;
  bool ReadFull(int fd, char* data, size_t size, bool frame_start,
                std::atomic<int64_t>* idle_since_ms = nullptr) const;
  // Until `fd` is readable (or hung up), Stop, or kWarmWindow after `last_frame`: sleeps of
  // kWarmSleep.
  void WaitWarm(int fd, absl::Time last_frame) const;

  const std::string path_;
  const int listen_fd_;
  const ServiceContext context_;
  MetricsSink* const metrics_;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  // Owned by the accept thread while it runs, then by Stop (which joins it first).
  ConnectionThreads connections_{kMaxConnections};  // The accept thread's only.
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_FAST_PATH_FAST_PATH_SERVER_H_
