#include "daemon/server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/server/listeners.h"
#include "daemon/server/lower_tiers.h"
#include "daemon/transfer/gpu_probe.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

SessionLimits LimitsFrom(const SessionsConfig& config) {
  return {absl::Milliseconds(config.heartbeat_timeout_ms),
          absl::Milliseconds(config.max_heartbeat_timeout_ms),
          static_cast<size_t>(config.max_sessions)};
}

std::string NewInstanceId() {
  absl::BitGen random;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(random),
                         absl::Uniform<uint64_t>(random));
}

}  // namespace

Daemon::Daemon(Config config)
    : config_(std::move(config)), sessions_(LimitsFrom(config_.sessions)) {
  identity_.instance_id = NewInstanceId();
  identity_.start_time = absl::Now();
  identity_.pid = static_cast<uint32_t>(getpid());
  sessions_.AddListener(this);
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(Config config) {
  std::unique_ptr<Daemon> daemon(new Daemon(std::move(config)));
  if (absl::Status s = daemon->StartServing(); !s.ok()) return s;
  return daemon;
}

absl::Status Daemon::StartServing() {
  absl::StatusOr<SocketLock> lock = SocketLock::Acquire(config_.server.socket);
  if (!lock.ok()) return lock.status();
  socket_lock_.emplace(std::move(*lock));
  absl::StatusOr<std::unique_ptr<PrometheusMetrics>> metrics =
      PrometheusMetrics::Create(config_.server.metrics_address);
  if (!metrics.ok()) return metrics.status();
  metrics_ = std::move(*metrics);
  identity_.metrics_address = metrics_->bound_address();
  absl::Time pool_start = absl::Now();
  tiers_ = MakeTierManager(config_, &namespaces_);
  absl::StatusOr<L1Pool> l1 = L1Pool::Create(config_.l1, config_.sessions, tiers_.get());
  if (!l1.ok()) return l1.status();
  l1_ = std::move(*l1);
  tiers_->AttachL1(l1_.cache.get(), static_cast<char*>(l1_.region->base()));
  spdlog::info("l1_ready bytes={} huge_pages={} populate_ms={}", l1_.region->size(),
               l1_.region->huge_pages(), absl::ToInt64Milliseconds(absl::Now() - pool_start));
  std::string fd_socket = config_.server.socket + ".shm";
  absl::StatusOr<std::unique_ptr<FdServer>> fd_server = FdServer::Start(
      fd_socket, config_.server.socket_mode, l1_.region->fd(), l1_.region->size(), &sessions_);
  if (!fd_server.ok()) return fd_server.status();
  fd_server_ = std::move(*fd_server);
  StartTransferEngine();

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  absl::StatusOr<ListenerSetup> listeners = AddListeners(config_.server, builder);
  if (!listeners.ok()) return listeners.status();
  identity_.listeners = listeners->listeners;
  guard_ = std::make_unique<CallGuard>(metrics_.get(), listeners->token);
  ServiceContext context{&config_,           &identity_,   &sessions_,
                         &namespaces_,       guard_.get(), l1_.cache.get(),
                         l1_.region->size(), fd_socket,    config_.server.socket + ".lookup",
                         jobs_.get(),        tiers_.get()};
  absl::StatusOr<std::unique_ptr<LookupServer>> lookup_server = LookupServer::Start(
      context.lookup_socket, config_.server.socket_mode, context, metrics_.get());
  if (!lookup_server.ok()) return lookup_server.status();
  lookup_server_ = std::move(*lookup_server);
  control_ = std::make_unique<ControlService>(context);
  admin_ = std::make_unique<AdminService>(context);
  builder.RegisterService(control_.get());
  builder.RegisterService(admin_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.server.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config_.server.max_message_bytes));

  mode_t old_mask = umask(0177);  // The socket appears as 0600, then gets its mode.
  server_ = builder.BuildAndStart();
  umask(old_mask);
  if (server_ == nullptr) {
    return absl::UnavailableError(
        "cannot listen on the configured socket or TCP address "
        "(is the address in use?)");
  }
  chmod(config_.server.socket.c_str(), config_.server.socket_mode);
  server_->GetHealthCheckService()->SetServingStatus(true);
  RegisterGauges();
  reaper_ = std::thread([this] { ReapLoop(); });
  for (const ListenerInfo& l : identity_.listeners) {
    spdlog::info("listening kind={} address={} tls={} token={}", l.kind, l.address, l.tls,
                 l.token_auth);
  }
  return absl::OkStatus();
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
    absl::StatusOr<std::unique_ptr<TransferEngine>> engine =
        TransferEngine::Create({l1_.region->base(), l1_.region->size()});
    if (engine.ok()) {
      engine_ = std::move(*engine);
    } else {
      engine_status = engine.status();
      spdlog::error("gpu_unavailable reason=\"{}\"", engine_status.ToString());
    }
  }
  identity_.cuda_enabled = engine_ != nullptr;
  jobs_ = std::make_unique<JobManager>(l1_.cache.get(), tiers_.get(), engine_.get(), engine_status);
}

void Daemon::RegisterGauges() {
  metrics_->AddGauge("kvstrata_sessions_active", "Open client sessions.",
                     [this] { return static_cast<double>(sessions_.size()); });
  metrics_->AddGauge("kvstrata_namespaces", "Registered namespaces.",
                     [this] { return static_cast<double>(namespaces_.size()); });
  metrics_->AddGauge("kvstrata_l1_used_bytes", "Bytes of the L1 pool in use.",
                     [this] { return static_cast<double>(l1_.cache->Stats().used_bytes); });
  metrics_->AddGauge("kvstrata_l1_capacity_bytes", "Bytes of the L1 pool.",
                     [this] { return static_cast<double>(l1_.cache->Stats().capacity_bytes); });
  metrics_->AddGauge("kvstrata_l1_blocks", "Blocks held in L1.",
                     [this] { return static_cast<double>(l1_.cache->Stats().blocks); });
  metrics_->AddGauge("kvstrata_uptime_seconds", "Seconds since the daemon started.",
                     [this] { return absl::ToDoubleSeconds(absl::Now() - identity_.start_time); });
}

void Daemon::ReapLoop() {
  while (!stop_reaper_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    for (uint64_t id : sessions_.ExpireStale()) {
      spdlog::warn("session_expired session={} reason=\"missed heartbeats\"", id);
    }
    ReapResult reaped = l1_.cache->ReapExpired();
    if (reaped.leases + reaped.reservations > 0) {
      spdlog::debug("reaped leases={} reservations={}", reaped.leases, reaped.reservations);
    }
  }
}

void Daemon::OnSessionEnded(uint64_t session_id) {
  namespaces_.ReleaseSession(session_id);
  jobs_->EndSession(session_id);  // Waits for the session's copies before the cache lets go.
  SessionEndResult freed = l1_.cache->EndSession(session_id);
  spdlog::debug("session_ended session={} leases={} reservations={} loads={}", session_id,
                freed.leases, freed.reservations, freed.loads);
}

void Daemon::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (jobs_ != nullptr) jobs_->Shutdown();  // Ends WatchCompletions streams.
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
    server_->Wait();
  }
  if (!stop_reaper_.HasBeenNotified()) stop_reaper_.Notify();
  if (reaper_.joinable()) reaper_.join();
  if (fd_server_ != nullptr) fd_server_->Stop();
  if (lookup_server_ != nullptr) lookup_server_->Stop();
  sessions_.CloseAll();
  if (tiers_ != nullptr) tiers_->Stop();  // No file I/O touches the pool after this.
  socket_lock_.reset();
}

Daemon::~Daemon() { Shutdown(absl::ZeroDuration()); }

}  // namespace kvstrata
