// The daemon core the socket and RPC fuzz targets feed: real sessions, namespaces, tenants
// (single-tenant), a 4 MiB L1 with one namespace's blocks stored, a JobManager without a GPU,
// and the shared-memory fd server and the lookup fast-path server on Unix sockets in a
// temporary directory; one open session that registered the namespace. Built once per
// process (Get); everything lives until the process exits.
#ifndef KVSTRATA_TESTS_FUZZ_FUZZ_DAEMON_H_
#define KVSTRATA_TESTS_FUZZ_FUZZ_DAEMON_H_

#include <stdlib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config_loader.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/metrics/prometheus_metrics.h"
#include "daemon/namespaces/namespace_registry.h"
#include "daemon/rpc/fast_path/fast_path_server.h"
#include "daemon/rpc/service_context.h"
#include "daemon/server/fd_server.h"
#include "daemon/server/l1_pool.h"
#include "daemon/session/process_fence.h"
#include "daemon/session/session_registry.h"
#include "daemon/session/tenant_table.h"

namespace kvstrata {

struct FuzzDaemon {
  static constexpr uint64_t kBlockBytes = 16 << 10;
  static constexpr int kStoredBlocks = 8;  // keys "fuzz-key-0" ... "fuzz-key-7"

  Config config = *LoadConfig("", {});
  ServerIdentity identity;
  SessionRegistry sessions{SessionLimits{}};
  NamespaceRegistry namespaces;
  TenantTable tenants = *TenantTable::Create({}, "");
  std::unique_ptr<PrometheusMetrics> metrics = *PrometheusMetrics::Create("");
  ProcessFence fence;
  L1Pool l1;
  std::unique_ptr<BlockStore> store;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<FdServer> fd_server;
  std::unique_ptr<FastPathServer> fast_path;
  ServiceContext context;
  std::string dir;
  uint64_t session = 0;
  uint32_t ns = 0;

  static FuzzDaemon& Get() {
    static FuzzDaemon* daemon = [] {
      auto* d = new FuzzDaemon;
      d->Build();
      return d;
    }();
    return *daemon;
  }

 private:
  void Build() {
    char tmp[] = "/tmp/kvs_fuzz_XXXXXX";
    dir = mkdtemp(tmp);
    config.l1.capacity_bytes = 4 << 20;
    config.l1.slab_bytes = 1 << 20;
    config.l1.huge_pages = "off";
    l1 = *L1Pool::Create(config.l1, config.sessions, nullptr);
    store = std::make_unique<BlockStore>(
        l1.cache.get(), nullptr,
        BlockStoreOptions{absl::Milliseconds(config.sessions.lease_ttl_ms),
                          absl::Milliseconds(config.sessions.max_lease_ttl_ms)});
    jobs = std::make_unique<JobManager>(
        store.get(), nullptr, absl::UnavailableError("no GPU in the fuzzer"), metrics.get());
    fd_server =
        *FdServer::Start(dir + "/k.sock.shm", 0600, l1.region.get(), &sessions, &tenants, &fence);
    context = ServiceContext{&config,
                             &identity,
                             &sessions,
                             &namespaces,
                             nullptr,
                             &tenants,
                             l1.cache.get(),
                             store.get(),
                             l1.region.get(),
                             dir + "/k.sock.shm",
                             dir + "/k.sock.lookup",
                             jobs.get(),
                             nullptr,
                             metrics.get()};
    fast_path = *FastPathServer::Start(context.lookup_socket, 0600, context, metrics.get());
    session = sessions.Open(kDefaultTenant, "fuzz", 1, "fuzz", absl::ZeroDuration())->id;
    jobs->OpenSession(session);
    NamespaceSpec spec;
    spec.engine_kind = EngineKind::kOther;
    spec.model = "fuzz";
    spec.dtype = DType::kUint8;
    spec.kv_layout = KvLayout::kOpaque;
    spec.opaque_block_bytes = kBlockBytes;
    ns = namespaces.Register(session, spec)->id;
    std::vector<std::string> keys;
    for (int i = 0; i < kStoredBlocks; ++i) keys.push_back("fuzz-key-" + std::to_string(i));
    std::vector<std::string_view> views(keys.begin(), keys.end());
    auto reserved = l1.cache->ReserveStore(session, ns, kBlockBytes, views);
    (void)l1.cache->CommitStore(session, reserved->reservation, std::nullopt);
  }
};

// Writes the live session id (at `session_at`) and namespace id (at `ns_at`) into `bytes`
// when it is long enough, so that inputs reach past the session and namespace checks.
inline void AimAtLiveSession(std::string& bytes, size_t session_at, size_t ns_at) {
  const FuzzDaemon& d = FuzzDaemon::Get();
  if (bytes.size() >= session_at + 8) {
    for (int i = 0; i < 8; ++i) bytes[session_at + i] = static_cast<char>(d.session >> (8 * i));
  }
  if (ns_at != 0 && bytes.size() >= ns_at + 4) {
    for (int i = 0; i < 4; ++i) bytes[ns_at + i] = static_cast<char>(d.ns >> (8 * i));
  }
}

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_FUZZ_FUZZ_DAEMON_H_
