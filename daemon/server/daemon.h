// kvstratad: owns the configuration, the core (sessions, namespaces, the L1 cache on its
// shared-memory pool), the gRPC server on its Unix socket (and optional TCP), the socket
// that hands the pool's fd to host-mode clients, the lookup fast-path socket, the metrics endpoint
// and the background reaper (expired sessions, leases and abandoned reservations). Start() serves
// until Shutdown(). Thread-safe: Shutdown may be called from any thread, once.
#ifndef KVSTRATA_DAEMON_SERVER_DAEMON_H_
#define KVSTRATA_DAEMON_SERVER_DAEMON_H_

#include <grpcpp/server.h>

#include <memory>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "daemon/config/config.h"
#include "daemon/events/event_publisher.h"
#include "daemon/events/kv_event_listener.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/metrics/prometheus_metrics.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/rpc/admin_service.h"
#include "daemon/rpc/control_service.h"
#include "daemon/rpc/fast_path/fast_path_server.h"
#include "daemon/server/fd_server.h"
#include "daemon/server/l1_pool.h"
#include "daemon/server/metrics_tier_listener.h"
#include "daemon/server/socket_lock.h"
#include "daemon/server/tenant_servers.h"
#include "daemon/server/tier_listener_fanout.h"
#include "daemon/session/client_counters.h"
#include "daemon/session/process_fence.h"
#include "daemon/session/session_registry.h"
#include "daemon/store/block_store.h"
#include "daemon/tiering/tier_manager.h"
#include "daemon/transfer/transfer_engine.h"

namespace kvstrata {

class Daemon : private SessionEndListener {
 public:
  // FAILED_PRECONDITION when another daemon serves the socket, UNAVAILABLE when a listener
  // cannot be bound, INVALID_ARGUMENT for unreadable TLS or token files.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(Config config);
  ~Daemon() override;

  // Stops accepting calls, lets running calls finish until `grace` has passed (then
  // cancels them), ends every session and removes the socket.
  void Shutdown(absl::Duration grace);

  const ServerIdentity& identity() const { return identity_; }

 private:
  Daemon(Config config, TenantTable tenants);
  absl::Status StartServing();
  void OnSessionEnded(uint64_t session_id) override;
  void ReapLoop();
  void RegisterGauges();
  void RegisterLowerTierGauges();
  void StartTransferEngine();
  absl::Status StartEvents();
  void LogEndpoints(const std::string& fd_socket, const std::string& lookup_socket) const;

  Config config_;
  const TenantTable tenants_;
  ServerIdentity identity_;
  std::unique_ptr<PrometheusMetrics> metrics_;
  ClientCounters client_counters_;  // the heartbeats' counters; outlives sessions_ (a listener)
  SessionRegistry sessions_;
  ProcessFence fence_;  // Processes the region was handed to; outlives l1_ (its cache asks).
  NamespaceRegistry namespaces_;
  std::unique_ptr<CallGuard> guard_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<AdminService> admin_;
  std::optional<SocketLock> socket_lock_;
  // KV events (null when disabled); declared before l1_ so they outlive the cache.
  std::unique_ptr<EventPublisher> events_;
  std::unique_ptr<KvEventListener> event_listener_;
  std::unique_ptr<MetricsTierListener> metrics_listener_;
  TierListenerFanout tier_listeners_;   // metrics, then events
  std::unique_ptr<TierManager> tiers_;  // below L1; outlives l1_ (its listener), stopped first.
  L1Pool l1_;
  std::unique_ptr<BlockStore> store_;       // Over l1_ and tiers_; outlives jobs_ and the services.
  std::unique_ptr<TransferEngine> engine_;  // Null without a GPU; destroyed before l1_.
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<FdServer> fd_server_;
  std::unique_ptr<FastPathServer> fast_path_;      // Stopped in Shutdown, before l1_ goes.
  std::unique_ptr<TenantServers> tenant_servers_;  // multi-tenant Unix socket; else null
  std::unique_ptr<grpc::Server> server_;  // Unix socket (single-tenant) and TCP; may be null
  absl::Notification stop_reaper_;
  std::thread reaper_;
  bool shut_down_ = false;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_DAEMON_H_
