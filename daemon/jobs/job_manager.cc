#include "daemon/jobs/job_manager.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

// Maps indices of a sub-list (`picked`) back to the job's block indices.
std::vector<uint32_t> Remap(const std::vector<uint32_t>& failed,
                            const std::vector<uint32_t>& picked) {
  std::vector<uint32_t> out;
  out.reserve(failed.size());
  for (uint32_t i : failed) out.push_back(picked[i]);
  return out;
}

// The job's stage times at debug level (`job_done ...`).
// settle_us: from the job's end (elapsed) to this line: committing a store's blocks, which
// its completion waits for (a load's completion goes before its blocks are unpinned).
void LogTimings(JobId job, const char* kind, size_t blocks, absl::Duration elapsed,
                const TransferTimings& t, absl::Time finished) {
  // Where a slow job's time went (issue 14's tail spikes): log.level = debug.
  spdlog::debug(
      "job_done job={} kind={} blocks={} elapsed_us={} queued_us={} plan_us={} issue_us={} "
      "idle_us={} wait_us={} gpu_us={} group_us={} copies_2d={} copy_entries={} settle_us={}",
      job, kind, blocks, absl::ToInt64Microseconds(elapsed), t.queued_us, t.plan_us, t.issue_us,
      t.idle_us, t.wait_us, t.gpu_us, t.group_us, t.copies_2d, t.copy_entries,
      absl::ToInt64Microseconds(absl::Now() - finished));
}

}  // namespace

JobManager::JobManager(BlockStore* store, TransferEngine* engine, absl::Status engine_status,
                       MetricsSink* metrics)
    : store_(store),
      engine_(engine),
      engine_status_(std::move(engine_status)),
      metrics_(metrics != nullptr ? metrics : &null_metrics_) {
  if (store_->promotes()) deferred_thread_ = std::thread([this] { DeferredLoop(); });
}

JobManager::~JobManager() { Shutdown(); }

void JobManager::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(deferred_mu_);
    deferred_stop_ = true;
  }
  deferred_cv_.notify_all();
  if (deferred_thread_.joinable()) deferred_thread_.join();
  completions_.Shutdown();
}

void JobManager::RecordTransfer(CopyDirection direction, uint64_t bytes, absl::Time start,
                                bool failed) {
  if (bytes > 0) metrics_->RecordTransfer(Tier::kL1, direction, bytes, absl::Now() - start);
  if (failed) {
    metrics_->RecordError(direction == CopyDirection::kDown ? "job_store_failed"
                                                            : "job_load_failed");
  }
}

absl::StatusOr<RegistrationId> JobManager::RegisterCuda(SessionId session, NamespaceId ns,
                                                        uint64_t block_bytes,
                                                        const CudaMemorySpec& spec) {
  if (engine_ == nullptr) return engine_status_;
  absl::StatusOr<uint64_t> id = engine_->Register(session, spec, block_bytes);
  if (!id.ok()) return id.status();
  MutexLock lock(&mu_);
  registrations_[*id] = {session, ns, true};
  return *id;
}

RegistrationId JobManager::RegisterHost(SessionId session, NamespaceId ns) {
  uint64_t id = next_id_.fetch_add(1) | (1ULL << 63);  // Never collides with engine ids.
  MutexLock lock(&mu_);
  registrations_[id] = {session, ns, false};
  return id;
}

absl::Status JobManager::Unregister(SessionId session, RegistrationId registration) {
  bool cuda = false;
  {
    MutexLock lock(&mu_);
    auto it = registrations_.find(registration);
    if (it == registrations_.end()) {
      return absl::NotFoundError(absl::StrCat("registration ", registration, " is unknown"));
    }
    if (it->second.session != session) {
      return absl::FailedPreconditionError(
          absl::StrCat("registration ", registration, " belongs to another session"));
    }
    cuda = it->second.cuda;
    registrations_.erase(it);
  }
  return cuda ? engine_->Unregister(session, registration) : absl::OkStatus();
}

absl::Status JobManager::CheckRegistration(SessionId session, NamespaceId ns,
                                           RegistrationId registration, const JobBlocks& blocks) {
  if (blocks.keys.size() != blocks.block_ids.size()) {
    return absl::InvalidArgumentError("blocks: keys and block ids differ in number");
  }
  MutexLock lock(&mu_);
  auto it = registrations_.find(registration);
  if (it == registrations_.end()) {
    return absl::NotFoundError(absl::StrCat("registration ", registration, " is unknown"));
  }
  const Registration& r = it->second;
  if (r.session != session) {
    return absl::FailedPreconditionError(
        absl::StrCat("registration ", registration, " belongs to another session"));
  }
  if (r.ns != ns) {
    return absl::FailedPreconditionError(
        absl::StrCat("registration ", registration, " is of namespace ", r.ns, ", not ", ns));
  }
  if (!r.cuda) {
    return absl::FailedPreconditionError(
        "a host-mode registration moves bytes with ReserveStore/AcquireLoad, not jobs");
  }
  return absl::OkStatus();
}

JobId JobManager::StartJob(SessionId session, JobCompletion::Kind kind) {
  uint64_t id = next_id_.fetch_add(1);
  MutexLock lock(&mu_);
  jobs_[id] = {session, false, kind, absl::Now()};
  return id;
}

bool JobManager::FinishJob(JobId job, absl::Duration* elapsed) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  bool cancelled = it == jobs_.end() || it->second.cancelled;
  if (it != jobs_.end()) {
    if (elapsed != nullptr) *elapsed = absl::Now() - it->second.started;
    jobs_.erase(it);
  }
  return !cancelled;
}

void JobManager::Complete(SessionId session, const SinkPtr& sink, JobCompletion completion) {
  if (sink != nullptr && sink->Deliver(session, completion)) return;
  completions_.Push(session, std::move(completion));
}

absl::StatusOr<JobId> JobManager::SubmitStore(SessionId session, NamespaceId ns,
                                              uint64_t block_bytes, RegistrationId registration,
                                              const JobBlocks& blocks,
                                              std::optional<uint32_t> wait_event, SinkPtr sink) {
  if (absl::Status s = CheckRegistration(session, ns, registration, blocks); !s.ok()) return s;
  // Slots are taken in the order of the engine's block ids. vLLM hands a request's blocks
  // out in descending order (it frees a request's blocks tail first), and slots in key
  // order would then run against the GPU's: no 2-D copies, one copy entry per piece.
  std::vector<uint32_t> slot_order;
  if (!std::is_sorted(blocks.block_ids.begin(), blocks.block_ids.end())) {
    slot_order.resize(blocks.block_ids.size());
    std::iota(slot_order.begin(), slot_order.end(), 0);
    std::stable_sort(slot_order.begin(), slot_order.end(), [&](uint32_t a, uint32_t b) {
      return blocks.block_ids[a] < blocks.block_ids[b];
    });
  }
  absl::StatusOr<ReserveResult> reserved =
      store_->l1().ReserveStore(session, ns, block_bytes, blocks.keys, false, slot_order);
  if (!reserved.ok()) return reserved.status();
  TransferRequest request{registration, CopyDirection::kDown, {}, wait_event};
  std::vector<uint32_t> picked;  // Job block index of each copy.
  for (uint32_t i = 0; i < reserved->slots.size(); ++i) {
    if (reserved->slots[i].status != StoreStatus::kReserved) continue;
    request.blocks.push_back({blocks.block_ids[i], reserved->slots[i].offset});
    picked.push_back(i);
  }
  JobId job = StartJob(session, JobCompletion::Kind::kStore);
  if (picked.empty()) {
    absl::Duration elapsed;
    FinishJob(job, &elapsed);
    Complete(session, sink, {job, JobCompletion::Kind::kStore, {}, "", elapsed});
    return job;
  }
  ReservationId reservation = reserved->reservation;
  absl::Time start = absl::Now();
  absl::Status submitted =
      engine_->Submit(session, std::move(request), [=, this](TransferResult result) {
        absl::Duration elapsed;
        bool live = FinishJob(job, &elapsed);
        const absl::Time finished = absl::Now();
        std::vector<uint32_t> failed = Remap(result.failed, picked);
        RecordTransfer(CopyDirection::kDown, (picked.size() - failed.size()) * block_bytes, start,
                       !failed.empty() || !result.error.empty());
        std::vector<uint32_t> written;
        for (uint32_t i : picked) {
          if (live && std::find(failed.begin(), failed.end(), i) == failed.end()) {
            written.push_back(i);
          }
        }
        if (written.empty()) {
          (void)store_->l1().AbortStore(session, reservation);
        } else {
          (void)store_->l1().CommitStore(session, reservation, absl::MakeConstSpan(written));
        }
        LogTimings(job, "store", picked.size(), elapsed, result.timings, finished);
        Complete(session, sink,
                 {job, JobCompletion::Kind::kStore, std::move(failed),
                  live ? result.error : "cancelled", elapsed});
      });
  if (!submitted.ok()) {
    FinishJob(job);
    (void)store_->l1().AbortStore(session, reservation);
    return submitted;
  }
  return job;
}

absl::StatusOr<JobId> JobManager::SubmitLoad(SessionId session, NamespaceId ns,
                                             RegistrationId registration, const JobBlocks& blocks,
                                             std::optional<LeaseId> lease,
                                             std::optional<uint64_t> layer_flag_value,
                                             SinkPtr sink) {
  if (absl::Status s = CheckRegistration(session, ns, registration, blocks); !s.ok()) return s;
  PendingLoad pending;
  // A layer-wise load runs now, in the engine's step: nothing waits for a disk.
  if (!layer_flag_value.has_value()) pending = store_->BeginLoad(ns, blocks.keys);
  const JobId job = StartJob(session, JobCompletion::Kind::kLoad);
  if (pending.waits().empty()) {
    if (absl::Status s =
            RunLoad(job, session, ns, registration, blocks, lease, layer_flag_value, sink);
        !s.ok()) {
      return s;
    }
    return job;
  }
  // Some blocks are still being read from L2/L3: the deferred-load thread finishes the job.
  DeferredLoad deferred{job,
                        session,
                        ns,
                        registration,
                        std::vector<std::string>(blocks.keys.begin(), blocks.keys.end()),
                        blocks.block_ids,
                        lease,
                        std::move(pending),
                        std::move(sink)};
  {
    std::lock_guard<std::mutex> lock(deferred_mu_);
    deferred_.push_back(std::move(deferred));
  }
  deferred_cv_.notify_all();
  return job;
}

void JobManager::DeferredLoop() {
  std::unique_lock<std::mutex> lock(deferred_mu_);
  for (;;) {
    deferred_cv_.wait(lock, [this] { return deferred_stop_ || !deferred_.empty(); });
    if (deferred_stop_) {
      deferred_.clear();
      return;
    }
    DeferredLoad load = std::move(deferred_.front());
    deferred_.pop_front();
    deferred_running_ = load.session;
    lock.unlock();
    std::vector<std::string_view> keys(load.keys.begin(), load.keys.end());
    absl::Status s = RunLoad(load.job, load.session, load.ns, load.registration,
                             JobBlocks{std::move(keys), load.block_ids}, load.lease, std::nullopt,
                             load.sink, std::move(load.pending));
    if (!s.ok()) {  // The job is finished: report every block failed, once.
      std::vector<uint32_t> all(load.block_ids.size());
      for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
      Complete(load.session, load.sink,
               {load.job, JobCompletion::Kind::kLoad, std::move(all), s.ToString()});
    }
    load = DeferredLoad{};  // Releases the promotion guard before taking the lock.
    lock.lock();
    deferred_running_ = 0;
    deferred_cv_.notify_all();
  }
}

absl::Status JobManager::RunLoad(JobId job, SessionId session, NamespaceId ns,
                                 RegistrationId registration, const JobBlocks& blocks,
                                 std::optional<LeaseId> lease,
                                 std::optional<uint64_t> layer_flag_value, const SinkPtr& sink,
                                 PendingLoad pending) {
  const absl::Time entered = absl::Now();
  absl::StatusOr<LoadResult> acquired =
      store_->FinishLoad(session, ns, blocks.keys, lease, std::move(pending));
  if (!acquired.ok()) {
    FinishJob(job);
    return acquired.status();
  }
  const absl::Time pinned = absl::Now();
  TransferRequest request{registration, CopyDirection::kUp, {}, std::nullopt, layer_flag_value};
  std::vector<uint32_t> picked, missing;
  for (uint32_t i = 0; i < acquired->slots.size(); ++i) {
    if (acquired->slots[i].status != LoadStatus::kReady) {
      missing.push_back(i);
      continue;
    }
    request.blocks.push_back({blocks.block_ids[i], acquired->slots[i].offset});
    picked.push_back(i);
  }
  LoadId load = acquired->load;
  uint64_t block_bytes = picked.empty() ? 0 : acquired->slots[picked.front()].length;
  absl::Time start = absl::Now();
  auto finish = [=, this](TransferResult result) {
    absl::Duration elapsed;
    bool live = FinishJob(job, &elapsed);
    const absl::Time finished = absl::Now();
    std::vector<uint32_t> failed = missing;
    for (uint32_t i : Remap(result.failed, picked)) failed.push_back(i);
    std::sort(failed.begin(), failed.end());
    std::string error = !live                   ? "cancelled"
                        : !result.error.empty() ? result.error
                        : missing.empty()       ? ""
                                                : "some blocks are not cached";
    LogTimings(job, "load", picked.size(), elapsed, result.timings, finished);
    // The engine's blocks hold their bytes now: it hears so first, then the pins go (the
    // copies that read them are done) and the metrics are counted.
    Complete(session, sink,
             {job, JobCompletion::Kind::kLoad, std::move(failed), std::move(error), elapsed});
    if (load != 0) (void)store_->l1().ReleaseLoad(session, load);
    RecordTransfer(CopyDirection::kUp, (picked.size() - result.failed.size()) * block_bytes, start,
                   !result.failed.empty() || !result.error.empty());
  };
  if (picked.empty()) {
    finish(TransferResult{});
    return absl::OkStatus();
  }
  absl::Status submitted = engine_->Submit(session, std::move(request), finish);
  if (!submitted.ok()) {
    FinishJob(job);
    if (load != 0) (void)store_->l1().ReleaseLoad(session, load);
    return submitted;
  }
  // The per-stage cost of handing a load over (docs/gpu-data-path.md): log.level = debug.
  // pin_us includes the wait for promotions of a deferred load.
  spdlog::debug("job_accepted job={} kind=load blocks={} pin_us={} engine_us={}", job,
                picked.size(), absl::ToInt64Microseconds(pinned - entered),
                absl::ToInt64Microseconds(absl::Now() - pinned));
  return absl::OkStatus();
}

absl::StatusOr<bool> JobManager::Cancel(SessionId session, JobId job) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.session != session) {
    return absl::NotFoundError(absl::StrCat("job ", job, " is unknown or already completed"));
  }
  it->second.cancelled = true;
  return true;
}

void JobManager::EndSession(SessionId session) {
  {  // Its queued loads are dropped; one the deferred thread runs now is waited for.
    std::unique_lock<std::mutex> lock(deferred_mu_);
    std::erase_if(deferred_, [&](const DeferredLoad& d) { return d.session == session; });
    deferred_cv_.wait(lock, [&] { return deferred_running_ != session; });
  }
  if (engine_ != nullptr) engine_->EndSession(session);  // Waits for its copies.
  completions_.EndSession(session);
  MutexLock lock(&mu_);
  absl::erase_if(registrations_, [&](const auto& r) { return r.second.session == session; });
  absl::erase_if(jobs_, [&](const auto& j) { return j.second.session == session; });
}

size_t JobManager::active_jobs() const {
  MutexLock lock(&mu_);
  return jobs_.size();
}

size_t JobManager::active_jobs(JobCompletion::Kind kind) const {
  MutexLock lock(&mu_);
  size_t count = 0;
  for (const auto& [id, job] : jobs_) count += job.kind == kind ? 1 : 0;
  return count;
}

size_t JobManager::registrations() const {
  MutexLock lock(&mu_);
  return registrations_.size();
}

size_t JobManager::registrations(SessionId session) const {
  MutexLock lock(&mu_);
  size_t count = 0;
  for (const auto& [id, reg] : registrations_) count += reg.session == session ? 1 : 0;
  return count;
}

}  // namespace kvstrata
