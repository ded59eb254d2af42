// What the gRPC services need from the daemon core. Everything pointed to is owned by the
// Daemon and outlives the services.
#ifndef KVSTRATA_DAEMON_RPC_SERVICE_CONTEXT_H_
#define KVSTRATA_DAEMON_RPC_SERVICE_CONTEXT_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/cache/partitioned_cache.h"
#include "daemon/config/config.h"
#include "daemon/events/event_publisher.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/pool/shm_region.h"
#include "daemon/rpc/call_guard.h"
#include "daemon/session/client_counters.h"
#include "daemon/session/session_registry.h"
#include "daemon/session/tenant_table.h"
#include "daemon/store/block_store.h"

namespace kvstrata {

struct ListenerInfo {
  std::string kind;  // "unix" or "tcp".
  std::string address;
  bool tls = false;
  bool token_auth = false;
};

// Facts about this daemon instance, fixed before it serves.
struct ServerIdentity {
  std::string instance_id;
  absl::Time start_time;
  uint32_t pid = 0;
  std::vector<ListenerInfo> listeners;
  std::string metrics_address;
  bool cuda_enabled = false;
};

struct ServiceContext {
  const Config* config = nullptr;
  const ServerIdentity* identity = nullptr;
  SessionRegistry* sessions = nullptr;
  NamespaceRegistry* namespaces = nullptr;
  CallGuard* guard = nullptr;
  const TenantTable* tenants = nullptr;       // who a connection is (docs/security.md)
  PartitionedCache* cache = nullptr;          // The L1 tier (one partition per tenant share).
  BlockStore* store = nullptr;                // Lookup, store and load across every tier.
  const ShmRegion* region = nullptr;          // The shared-memory region (its partitions).
  std::string shm_fd_socket;                  // Where host-mode clients receive the region's fd.
  std::string lookup_socket;                  // The fast path (FastPathServer); "" when absent.
  JobManager* jobs = nullptr;                 // GPU store/load jobs and KV memory registrations.
  EventPublisher* events = nullptr;           // KV events; nullptr when [events] is disabled.
  MetricsSink* metrics = nullptr;             // lookups and hits; nullptr reports nothing.
  ClientCounters* client_counters = nullptr;  // heartbeats' counters; nullptr keeps none.
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_SERVICE_CONTEXT_H_
