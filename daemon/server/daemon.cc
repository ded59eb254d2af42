#include "daemon/server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/common/byte_size.h"
#include "daemon/server/listeners.h"
#include "daemon/server/lower_tiers.h"
#include "daemon/server/tenant_servers.h"
#include "daemon/transfer/gpu_probe.h"
#include "daemon/transfer/transfer_validation.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

SessionLimits LimitsFrom(const SessionsConfig& config) {
  return {absl::Milliseconds(config.heartbeat_timeout_ms),
          absl::Milliseconds(config.max_heartbeat_timeout_ms),
          static_cast<size_t>(config.max_sessions)};
}

// `status`, its message naming the config key(s) `keys` that set what failed, unless it does.
absl::Status NamingKey(const absl::Status& status, absl::string_view keys) {
  if (status.ok() || absl::StrContains(status.message(), keys)) return status;
  return absl::Status(status.code(), absl::StrCat("config key ", keys, ": ", status.message()));
}

// The events.* key whose endpoint a failed start of the publisher names.
std::string EventsKeyOf(const EventsConfig& c, absl::string_view message) {
  auto names = [&](const std::string& endpoint) {
    return !endpoint.empty() && absl::StrContains(message, absl::StrCat("'", endpoint, "'"));
  };
  bool pub = names(c.endpoint), replay = names(c.replay_endpoint);
  if (pub != replay) return pub ? "'events.endpoint'" : "'events.replay_endpoint'";
  return "'events.endpoint' or 'events.replay_endpoint'";
}

std::string NewInstanceId() {
  absl::BitGen random;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(random),
                         absl::Uniform<uint64_t>(random));
}

}  // namespace

Daemon::Daemon(Config config, TenantTable tenants)
    : config_(std::move(config)),
      tenants_(std::move(tenants)),
      sessions_(LimitsFrom(config_.sessions)) {
  identity_.instance_id = NewInstanceId();
  identity_.start_time = absl::Now();
  identity_.pid = static_cast<uint32_t>(getpid());
  sessions_.AddListener(this);
  sessions_.AddListener(&client_counters_);
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(Config config) {
  absl::StatusOr<TenantTable> tenants =
      TenantTable::Create(config.tenants, config.server.auth_token_file);
  if (!tenants.ok()) return tenants.status();
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(config), std::move(*tenants)));
  if (absl::Status s = daemon->StartServing(); !s.ok()) return s;
  return daemon;
}

absl::Status Daemon::StartServing() {
  // Every failure below names the config key of what failed (issue 46).
  absl::StatusOr<SocketLock> lock = SocketLock::Acquire(config_.server.socket);
  if (!lock.ok()) return NamingKey(lock.status(), "'server.socket'");
  socket_lock_.emplace(std::move(*lock));
  // The tier table first: metrics and KV events name the tiers by it.
  absl::StatusOr<std::unique_ptr<TierManager>> tiers = MakeTierManager(config_, &namespaces_);
  if (!tiers.ok()) return tiers.status();
  tiers_ = std::move(*tiers);
  absl::StatusOr<std::unique_ptr<PrometheusMetrics>> metrics =
      PrometheusMetrics::Create(config_.server.metrics_address, tiers_->table());
  if (!metrics.ok()) return NamingKey(metrics.status(), "'server.metrics_address'");
  metrics_ = std::move(*metrics);
  identity_.metrics_address = metrics_->bound_address();
  if (absl::Status s = StartEvents(); !s.ok()) return s;
  metrics_listener_ = std::make_unique<MetricsTierListener>(metrics_.get());
  tier_listeners_.Add(metrics_listener_.get());
  tier_listeners_.Add(event_listener_.get());
  absl::Time pool_start = absl::Now();
  tiers_->SetNextListener(&tier_listeners_);  // L1 notices go on to metrics and events.
  tiers_->SetMetrics(metrics_.get());
  absl::StatusOr<L1Pool> l1 = L1Pool::Create(
      config_.l1, config_.sessions, tiers_.get(),
      [this](SessionId session) { return fence_.MayWrite(session); }, tenants_.L1Shares());
  if (!l1.ok()) return l1.status();
  l1_ = std::move(*l1);
  tiers_->AttachL1(l1_.cache.get(), static_cast<char*>(l1_.region->base()));
  store_ = std::make_unique<BlockStore>(
      l1_.cache.get(), tiers_.get(),
      BlockStoreOptions{absl::Milliseconds(config_.sessions.lease_ttl_ms),
                        absl::Milliseconds(config_.sessions.max_lease_ttl_ms)});
  spdlog::info("l1_ready size=\"{}\" huge_pages={} populate_ms={}",
               HumanByteSize(l1_.region->size()), l1_.region->huge_pages(),
               absl::ToInt64Milliseconds(absl::Now() - pool_start));
  std::string fd_socket = config_.server.socket + ".shm";
  absl::StatusOr<std::unique_ptr<FdServer>> fd_server = FdServer::Start(
      fd_socket, config_.server.socket_mode, l1_.region.get(), &sessions_, &tenants_, &fence_);
  if (!fd_server.ok()) return NamingKey(fd_server.status(), "'server.socket'");
  fd_server_ = std::move(*fd_server);
  StartTransferEngine();

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const bool multi_tenant = tenants_.multi_tenant();
  int unix_bound = 0;  // set by BuildAndStart
  absl::StatusOr<std::vector<ListenerInfo>> listeners =
      AddListeners(config_, /*with_unix=*/!multi_tenant, builder, &unix_bound);
  if (!listeners.ok()) return listeners.status();
  identity_.listeners = *listeners;
  guard_ = std::make_unique<CallGuard>(metrics_.get(), &tenants_);
  ServiceContext context{&config_,
                         &identity_,
                         &sessions_,
                         &namespaces_,
                         guard_.get(),
                         &tenants_,
                         l1_.cache.get(),
                         store_.get(),
                         l1_.region.get(),
                         fd_socket,
                         config_.server.socket + ".lookup",
                         jobs_.get(),
                         events_.get(),
                         metrics_.get(),
                         &client_counters_};
  absl::StatusOr<std::unique_ptr<FastPathServer>> fast_path = FastPathServer::Start(
      context.lookup_socket, config_.server.socket_mode, context, metrics_.get());
  if (!fast_path.ok()) return NamingKey(fast_path.status(), "'server.socket'");
  fast_path_ = std::move(*fast_path);
  control_ = std::make_unique<ControlService>(context);
  admin_ = std::make_unique<AdminService>(context);
  builder.RegisterService(control_.get());
  builder.RegisterService(admin_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.server.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config_.server.max_message_bytes));

  if (multi_tenant) {
    absl::StatusOr<std::unique_ptr<TenantServers>> tenant_servers = TenantServers::Start(context);
    if (!tenant_servers.ok()) return tenant_servers.status();
    tenant_servers_ = std::move(*tenant_servers);
  }
  if (!multi_tenant || !config_.server.tcp_address.empty()) {
    mode_t old_mask = umask(0177);  // The socket appears as 0600, then gets its mode.
    server_ = builder.BuildAndStart();
    umask(old_mask);
    if (server_ == nullptr) {
      // The Unix socket is bound first: bound, it is the TCP address that failed.
      const ServerConfig& c = config_.server;
      if (!multi_tenant && unix_bound == 0) {
        return absl::UnavailableError(
            absl::StrCat("config key 'server.socket': cannot listen on '", c.socket, "'"));
      }
      return absl::UnavailableError(
          absl::StrCat("config key 'server.tcp_address': cannot listen on '", c.tcp_address,
                       "' (is the address in use?)"));
    }
    if (!multi_tenant) chmod(config_.server.socket.c_str(), config_.server.socket_mode);
    server_->GetHealthCheckService()->SetServingStatus(true);
  }
  RegisterGauges();
  reaper_ = std::thread([this] { ReapLoop(); });
  LogEndpoints(fd_socket, context.lookup_socket);
  for (const Caller& t : tenants_.Tenants()) {
    spdlog::info("tenant name={} id={} admin={} shared_memory={}", t.namespace_scope, t.tenant,
                 t.admin, t.shared_memory);
  }
  return absl::OkStatus();
}

void Daemon::LogEndpoints(const std::string& fd_socket, const std::string& lookup_socket) const {
  // Every address a client, a scraper or a router may need, once all of them serve.
  for (const ListenerInfo& l : identity_.listeners) {
    spdlog::info("listening kind=grpc-{} address={} tls={} token={}", l.kind, l.address, l.tls,
                 l.token_auth);
  }
  spdlog::info("listening kind=lookup address={} what=\"fast-path lookups\"", lookup_socket);
  spdlog::info("listening kind=shm address={} what=\"shared-memory fd for host mode\"", fd_socket);
  if (identity_.metrics_address.empty()) {
    spdlog::info("listening kind=metrics address=off");
  } else {
    spdlog::info("listening kind=metrics address=http://{}/metrics", identity_.metrics_address);
  }
  const EventsConfig& e = config_.events;
  if (!e.enabled) {
    spdlog::info("listening kind=events address=off");
    return;
  }
  if (e.endpoint.empty()) {
    spdlog::info("listening kind=events address=off what=\"PollEvents only, no ZMQ\"");
  } else {
    spdlog::info("listening kind=events address={}", e.endpoint);
  }
  if (!e.replay_endpoint.empty()) {
    spdlog::info("listening kind=events-replay address={}", e.replay_endpoint);
  }
}

void Daemon::StartTransferEngine() {
  GpuProbe gpus = ProbeGpus();
  spdlog::info("gpu cuda_built={} devices={} note=\"{}\"", gpus.built_with_cuda,
               gpus.devices.size(), gpus.note);
  absl::Status engine_status;
  if (!gpus.built_with_cuda) {
    engine_status = absl::UnimplementedError(
        "this kvstratad was built without CUDA: only host mode is available");
  } else if (gpus.devices.empty()) {
    engine_status = absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device is visible to kvstratad (", gpus.note, "): only host mode is available"));
  } else {
    TransferEngineOptions options;
    options.host_base = l1_.region->base();
    options.host_bytes = l1_.region->size();
    options.copy_strategy =
        CopyStrategyFromName(config_.gpu.copy_strategy).value_or(CopyStrategy::kAuto);
    options.kernel_max_piece_bytes = config_.gpu.staged_max_piece_bytes;
    options.calibrate = config_.gpu.calibrate;
    options.copy_streams = static_cast<uint32_t>(config_.gpu.copy_streams);
    absl::StatusOr<std::unique_ptr<TransferEngine>> engine = TransferEngine::Create(options);
    if (engine.ok()) {
      engine_ = std::move(*engine);
      for (const std::string& choice : engine_->CopyChoices()) {
        spdlog::info("gpu_copy_choice {}", choice);
      }
    } else {
      engine_status = engine.status();
      spdlog::error("gpu_unavailable reason=\"{}\"", engine_status.ToString());
    }
  }
  identity_.cuda_enabled = engine_ != nullptr;
  jobs_ = std::make_unique<JobManager>(store_.get(), engine_.get(), engine_status, metrics_.get());
}

absl::Status Daemon::StartEvents() {
  const EventsConfig& c = config_.events;
  if (!c.enabled) return absl::OkStatus();
  EventPublisherOptions options;
  options.endpoint = c.endpoint;
  options.replay_endpoint = c.replay_endpoint;
  options.pod_id = c.pod_id;
  options.encoding = c.encoding == "map" ? EventEncoding::kMap : EventEncoding::kArray;
  options.data_parallel_rank = c.data_parallel_rank;
  options.buffer_batches = static_cast<size_t>(c.buffer_batches);
  options.max_queue_events = static_cast<size_t>(c.max_queue_events);
  options.send_hwm = static_cast<int>(c.send_hwm);
  options.flush_interval = absl::Milliseconds(c.flush_interval_ms);
  options.tiers = tiers_->table();
  absl::StatusOr<std::unique_ptr<EventPublisher>> publisher = EventPublisher::Start(
      std::move(options), [this](NamespaceId ns) -> std::optional<NamespaceFacts> {
        std::optional<NamespaceInfo> info = namespaces_.Find(ns);
        if (!info.has_value()) return std::nullopt;
        return NamespaceFacts{info->spec.model, info->spec.tokens_per_block};
      });
  if (!publisher.ok()) {
    return NamingKey(publisher.status(), EventsKeyOf(c, publisher.status().message()));
  }
  events_ = std::move(*publisher);
  event_listener_ = std::make_unique<KvEventListener>(events_.get());
  spdlog::info("events endpoint=\"{}\" replay=\"{}\" topic=\"{}\" encoding={}", c.endpoint,
               c.replay_endpoint, events_->Topic("<model>"), c.encoding);
  return absl::OkStatus();
}

void Daemon::RegisterGauges() {
  MetricsSink& m = *metrics_;
  PartitionedCache* l1 = l1_.cache.get();
  auto stat = [l1](uint64_t CacheStats::*field) {
    return [l1, field] { return static_cast<double>((l1->Stats().*field)); };
  };
  const MetricLabelPairs tier_l1 = {{"tier", "l1"}};
  m.AddGauge("kvstrata_tier_capacity_bytes", "Capacity of each tier in bytes.", tier_l1,
             stat(&CacheStats::capacity_bytes));
  m.AddGauge("kvstrata_tier_used_bytes", "Bytes in use in each tier.", tier_l1,
             stat(&CacheStats::used_bytes));
  m.AddGauge("kvstrata_tier_blocks", "Blocks held in each tier.", tier_l1,
             stat(&CacheStats::blocks));
  m.AddCounter("kvstrata_stores_dropped_total",
               "Blocks offered for storing that were not stored, by tier and reason (no_space, "
               "not_admitted, queue_full, io_error).",
               {{"tier", "l1"}, {"reason", "no_space"}}, stat(&CacheStats::dropped_stores));
  m.AddCounter("kvstrata_stores_dropped_total", "", {{"tier", "l1"}, {"reason", "not_admitted"}},
               stat(&CacheStats::not_admitted));
  m.AddCounter("kvstrata_evictions_total", "Blocks evicted by each tier's eviction policy.",
               tier_l1, stat(&CacheStats::evictions));
  RegisterLowerTierGauges();
  for (const Caller& t : tenants_.Tenants()) {  // tenants with an L1 partition of their own
    if (t.partition == 0) continue;
    const size_t p = t.partition;
    const MetricLabelPairs labels = {{"tenant", t.namespace_scope}};
    m.AddGauge("kvstrata_tenant_l1_capacity_bytes",
               "L1 bytes of the tenants with a partition of their own (tenants[].l1_capacity).",
               labels,
               [l1, p] { return static_cast<double>(l1->PartitionStats(p).capacity_bytes); });
    m.AddGauge("kvstrata_tenant_l1_used_bytes", "L1 bytes in use in a tenant's own partition.",
               labels, [l1, p] { return static_cast<double>(l1->PartitionStats(p).used_bytes); });
  }
  m.AddCounter("kvstrata_slab_moves_total", "L1 slabs moved between block size classes.", {},
               stat(&CacheStats::slab_moves));
  m.AddGauge("kvstrata_leases_active", "Lookup leases held.", {}, stat(&CacheStats::active_leases));
  m.AddGauge("kvstrata_reservations_active", "Store reservations not yet committed.", {},
             stat(&CacheStats::active_reservations));
  m.AddGauge("kvstrata_loads_active", "Host-mode loads holding blocks.", {},
             stat(&CacheStats::active_loads));
  m.AddGauge("kvstrata_fenced_bytes",
             "L1 bytes held back for ended sessions whose process may still touch them: "
             "reserved slots it may still write, and blocks of its loads pinned while it may "
             "still read them (freed when the process exits).",
             {}, stat(&CacheStats::fenced_bytes));
  m.AddGauge("kvstrata_sessions_active", "Open client sessions.",
             [this] { return static_cast<double>(sessions_.size()); });
  m.AddCounterFamily("kvstrata_client_counter_total",
                     "Counters the clients report in their heartbeats (e.g. the load planner's "
                     "plan_in_step), by name, summed over every session, ended ones included.",
                     "name", [this] {
                       LabelledValues out;
                       for (const auto& [name, value] : client_counters_.Totals()) {
                         out.emplace_back(name, static_cast<double>(value));
                       }
                       return out;
                     });
  m.AddGauge("kvstrata_namespaces", "Registered namespaces.",
             [this] { return static_cast<double>(namespaces_.size()); });
  m.AddGauge("kvstrata_registrations_active", "KV memory registrations (CUDA and host).",
             [this] { return static_cast<double>(jobs_->registrations()); });
  m.AddGauge(
      "kvstrata_jobs_active", "Store and load jobs running, by kind.", {{"kind", "store"}},
      [this] { return static_cast<double>(jobs_->active_jobs(JobCompletion::Kind::kStore)); });
  m.AddGauge("kvstrata_jobs_active", "", {{"kind", "load"}}, [this] {
    return static_cast<double>(jobs_->active_jobs(JobCompletion::Kind::kLoad));
  });
  m.AddGauge("kvstrata_completions_pending", "Job completions not yet taken by their sessions.",
             [this] { return static_cast<double>(jobs_->completions().pending()); });
  m.AddGauge("kvstrata_uptime_seconds", "Seconds since the daemon started.",
             [this] { return absl::ToDoubleSeconds(absl::Now() - identity_.start_time); });
  m.AddGauge("kvstrata_events_enabled", "1 when KV events are published.",
             [this] { return events_ != nullptr ? 1.0 : 0.0; });
  if (events_ != nullptr) {
    EventPublisher* ev = events_.get();
    m.AddGauge("kvstrata_events_queue_depth", "Block notices waiting to be published.",
               [ev] { return static_cast<double>(ev->Stats().queued); });
    m.AddCounter("kvstrata_events_dropped_total", "Block notices lost to a full event queue.", {},
                 [ev] { return static_cast<double>(ev->Stats().dropped_events); });
    m.AddCounter("kvstrata_events_published_total", "KV events published.", {},
                 [ev] { return static_cast<double>(ev->Stats().published_events); });
    m.AddCounter("kvstrata_event_batches_published_total", "KV event batches published.", {},
                 [ev] { return static_cast<double>(ev->Stats().published_batches); });
  }
}

void Daemon::RegisterLowerTierGauges() {
  // Each lower tier's series read the TierManager's status at scrape time; a tier of the
  // table that is off or did not open reads 0, so every tier's series exists.
  MetricsSink& m = *metrics_;
  for (const TierDescriptor& d : tiers_->table().all()) {
    if (d.id == Tier::kL1) continue;
    const Tier tier = d.id;
    auto read = [this, tier](std::function<double(const LowerTierStatus&)> field) {
      return [this, tier, field]() -> double {
        for (const LowerTierStatus& st : tiers_->Status()) {
          if (st.tier == tier) return field(st);
        }
        return 0;
      };
    };
    const std::string& name = d.label;
    const MetricLabelPairs labels = {{"tier", name}};
    m.AddGauge("kvstrata_tier_capacity_bytes", "", labels,
               read([](const LowerTierStatus& s) { return double(s.stats.effective_bytes); }));
    m.AddGauge("kvstrata_tier_used_bytes", "", labels,
               read([](const LowerTierStatus& s) { return double(s.stats.used_bytes); }));
    m.AddGauge("kvstrata_tier_blocks", "", labels,
               read([](const LowerTierStatus& s) { return double(s.stats.blocks); }));
    m.AddCounter("kvstrata_evictions_total", "", labels,
                 read([](const LowerTierStatus& s) { return double(s.stats.evictions); }));
    m.AddGauge("kvstrata_tier_write_queue_depth", "Writes queued for each lower tier.", labels,
               read([](const LowerTierStatus& s) { return double(s.queued_writes); }));
    m.AddCounter("kvstrata_stores_dropped_total", "", {{"tier", name}, {"reason", "queue_full"}},
                 read([](const LowerTierStatus& s) { return double(s.dropped_writes); }));
    m.AddCounter("kvstrata_stores_dropped_total", "", {{"tier", name}, {"reason", "no_space"}},
                 read([](const LowerTierStatus& s) { return double(s.stats.refused_writes); }));
    m.AddCounter("kvstrata_stores_dropped_total", "", {{"tier", name}, {"reason", "shed"}},
                 read([](const LowerTierStatus& s) { return double(s.shed_writes); }));
    m.AddGauge("kvstrata_tier_deferred_writes",
               "Blocks waiting for their first L1 hit to be written to each lower tier (its "
               "write queue was full when they were stored).",
               labels, read([](const LowerTierStatus& s) { return double(s.deferred_writes); }));
    m.AddCounter("kvstrata_stores_dropped_total", "", {{"tier", name}, {"reason", "io_error"}},
                 read([](const LowerTierStatus& s) { return double(s.stats.write_errors); }));
    m.AddCounter("kvstrata_promoted_blocks_total", "Blocks promoted from each lower tier into L1.",
                 labels, read([](const LowerTierStatus& s) { return double(s.promoted_blocks); }));
    m.AddCounter("kvstrata_tier_read_errors_total", "Failed reads of each lower tier (misses).",
                 labels,
                 read([](const LowerTierStatus& s) { return double(s.stats.read_errors); }));
    m.AddCounter("kvstrata_tier_quarantined_total",
                 "Bad files (checksum, foreign, truncated) moved aside in each lower tier.", labels,
                 read([](const LowerTierStatus& s) { return double(s.stats.quarantined); }));
    m.AddCounter("kvstrata_tier_journal_lines_read_total",
                 "Lines of the other daemons' L3 write journals read into this daemon's index "
                 "(blocks they wrote, used or deleted).",
                 labels,
                 read([](const LowerTierStatus& s) { return double(s.stats.followed_lines); }));
  }
}

void Daemon::ReapLoop() {
  while (!stop_reaper_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    for (uint64_t id : sessions_.ExpireStale()) {
      spdlog::warn("session_expired session={} reason=\"missed heartbeats\"", id);
    }
    ReapResult reaped = l1_.cache->ReapExpired();
    if (reaped.leases + reaped.reservations > 0) {
      spdlog::debug("reaped leases={} reservations={} fenced_slots={}", reaped.leases,
                    reaped.reservations, reaped.fenced_slots);
    }
    for (uint64_t id : fence_.Exited()) {
      if (size_t released = l1_.cache->ReleaseFenced(id); released > 0) {
        spdlog::info("fence_released session={} slots={} reason=\"process exited\"", id, released);
      }
    }
  }
}

void Daemon::OnSessionEnded(uint64_t session_id) {
  namespaces_.ReleaseSession(session_id);
  jobs_->EndSession(session_id);  // Waits for the session's copies before the cache lets go.
  SessionEndResult freed = l1_.cache->EndSession(session_id);
  spdlog::debug("session_ended session={} leases={} reservations={} loads={}", session_id,
                freed.leases, freed.reservations, freed.loads);
  if (freed.fenced_slots > 0) {
    spdlog::warn(
        "session_fenced session={} slots={} reason=\"its process may still write the "
        "shared region: the slots go back when it exits\"",
        session_id, freed.fenced_slots);
  } else {
    fence_.Forget(session_id);  // Nothing of it is held: its process need not be watched.
  }
}

void Daemon::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (jobs_ != nullptr) jobs_->Shutdown();  // Ends WatchCompletions streams.
  if (tenant_servers_ != nullptr) tenant_servers_->Shutdown(absl::Now() + grace);
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    server_->Wait();
  }
  if (!stop_reaper_.HasBeenNotified()) stop_reaper_.Notify();
  if (reaper_.joinable()) reaper_.join();
  if (fd_server_ != nullptr) fd_server_->Stop();
  if (fast_path_ != nullptr) fast_path_->Stop();
  sessions_.CloseAll();
  if (tiers_ != nullptr) tiers_->Stop();    // No file I/O touches the pool after this.
  if (events_ != nullptr) events_->Stop();  // Publishes what is queued.
  socket_lock_.reset();
}

Daemon::~Daemon() { Shutdown(absl::ZeroDuration()); }

}  // namespace kvstrata
