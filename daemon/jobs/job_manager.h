// Store and load jobs between an engine's registered GPU KV memory and the L1 cache, through
// the BlockStore (daemon/store/block_store.h).
//
// A store reserves L1 slots for the new keys, has the TransferEngine copy the GPU blocks
// into them (after the engine's forward-pass event), and commits exactly the blocks whose
// copies succeeded; keys already present or dropped under pressure need no copy and are
// not failures. A load pins the present keys (consuming a lease if given), copies them
// into the GPU blocks, and reports every key that is missing or whose copy failed, so the
// engine recomputes those tokens; its pins are released right after its completion went
// out (the copies that read them are done then). A load whose blocks must first come up
// from L2/L3 returns its job id at once: the promotions run on the tiers' I/O threads and
// the rest of the load on this manager's deferred-load thread, so SubmitLoad (on an
// engine's step path) does not wait for a disk read -- except while a lower tier is still
// scanning its files after a restart: then BlockStore::BeginLoad probes the files the
// index cannot tell about first, for up to the tiers' promotion_wait (5 s by default).
// The lease a load names may be another session's of the same tenant (rpc/lease_adoption.h).
// Completions go to the job's CompletionSink when it was given one and takes it, else to a
// per-session CompletionQueue. Without a TransferEngine (no GPU, or a
// build without CUDA) CUDA registration answers FAILED_PRECONDITION / UNIMPLEMENTED and
// host-mode registrations are only recorded.
//
// Thread safety: thread-safe. EndSession must run before the cache's EndSession for the
// same session (it waits for the session's copies and deferred loads, whose completions
// touch the cache). Shutdown (or destruction) stops the deferred-load thread; loads still
// queued then are dropped.
#ifndef KVSTRATA_DAEMON_JOBS_JOB_MANAGER_H_
#define KVSTRATA_DAEMON_JOBS_JOB_MANAGER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "daemon/common/mutex.h"
#include "daemon/jobs/completion_queue.h"
#include "daemon/jobs/completion_sink.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/store/block_store.h"
#include "daemon/transfer/transfer_engine.h"

namespace kvstrata {

struct JobBlocks {
  std::vector<std::string_view> keys;  // Valid during the Submit call.
  std::vector<uint32_t> block_ids;     // Same length as keys.
};

// A job's completion sink: null = the session's CompletionQueue.
using SinkPtr = std::shared_ptr<CompletionSink>;

class JobManager {
 public:
  // `engine` may be null (no GPU); `engine_status` then says why.
  // `store` (not owned) holds the blocks; when it has lower tiers, loads of L2/L3 blocks
  // finish on the deferred-load thread. `metrics` (not owned, may be null) gets each job's
  // GPU<->L1 bytes and latency and failed jobs as errors.
  JobManager(BlockStore* store, TransferEngine* engine, absl::Status engine_status,
             MetricsSink* metrics = nullptr);
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  absl::StatusOr<RegistrationId> RegisterCuda(SessionId session, NamespaceId ns,
                                              uint64_t block_bytes, const CudaMemorySpec& spec);
  RegistrationId RegisterHost(SessionId session, NamespaceId ns);
  absl::Status Unregister(SessionId session, RegistrationId registration);

  absl::StatusOr<JobId> SubmitStore(SessionId session, NamespaceId ns, uint64_t block_bytes,
                                    RegistrationId registration, const JobBlocks& blocks,
                                    std::optional<uint32_t> wait_event, SinkPtr sink = nullptr);
  // `layer_flag_value` (TransferRequest.layer_flag_value): a layer-wise load; it promotes
  // nothing (blocks not in L1 fail), so it runs now, in the engine's step.
  absl::StatusOr<JobId> SubmitLoad(SessionId session, NamespaceId ns, RegistrationId registration,
                                   const JobBlocks& blocks, std::optional<LeaseId> lease,
                                   std::optional<uint64_t> layer_flag_value = std::nullopt,
                                   SinkPtr sink = nullptr);
  // True when the job was still running: its result is discarded (a store commits nothing)
  // and its completion says "cancelled". NOT_FOUND when unknown or already completed.
  absl::StatusOr<bool> Cancel(SessionId session, JobId job);

  CompletionQueue& completions() { return completions_; }
  void OpenSession(SessionId session) { completions_.OpenSession(session); }
  void EndSession(SessionId session);
  void Shutdown();
  size_t active_jobs() const;
  size_t active_jobs(JobCompletion::Kind kind) const;
  size_t registrations() const;
  size_t registrations(SessionId session) const;  // of one session

 private:
  struct Registration {
    SessionId session = 0;
    NamespaceId ns = 0;
    bool cuda = false;
  };
  struct Job {
    SessionId session = 0;
    bool cancelled = false;
    JobCompletion::Kind kind = JobCompletion::Kind::kStore;
    absl::Time started;
  };
  // A load waiting for its L2/L3 promotions; owns its keys.
  struct DeferredLoad {
    JobId job = 0;
    SessionId session = 0;
    NamespaceId ns = 0;
    RegistrationId registration = 0;
    std::vector<std::string> keys;
    std::vector<uint32_t> block_ids;
    std::optional<LeaseId> lease;
    PendingLoad pending;
    SinkPtr sink;
  };
  absl::Status CheckRegistration(SessionId session, NamespaceId ns, RegistrationId registration,
                                 const JobBlocks& blocks);
  // Waits for `pending` (the load's promotions, if any), acquires the blocks in L1 and
  // submits their copies for an already started load job. On error the job is finished
  // (no completion) and the error returned.
  absl::Status RunLoad(JobId job, SessionId session, NamespaceId ns, RegistrationId registration,
                       const JobBlocks& blocks, std::optional<LeaseId> lease,
                       std::optional<uint64_t> layer_flag_value, const SinkPtr& sink,
                       PendingLoad pending = {});
  void DeferredLoop();
  JobId StartJob(SessionId session, JobCompletion::Kind kind);
  // Reports one finished job's copies to the metrics sink.
  void RecordTransfer(CopyDirection direction, uint64_t bytes, absl::Time start, bool failed);
  // Removes the job; false when it was cancelled. `elapsed` (optional): time since StartJob.
  bool FinishJob(JobId job, absl::Duration* elapsed = nullptr);
  // To `sink` when it takes it, else to the session's queue.
  void Complete(SessionId session, const SinkPtr& sink, JobCompletion completion);

  BlockStore* const store_;
  TransferEngine* const engine_;
  const absl::Status engine_status_;
  MetricsSink* const metrics_;  // never null (NullMetricsSink when none was given)
  NullMetricsSink null_metrics_;
  CompletionQueue completions_;
  std::atomic<uint64_t> next_id_{1};
  mutable Mutex mu_;
  absl::flat_hash_map<uint64_t, Registration> registrations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::mutex deferred_mu_;
  std::condition_variable deferred_cv_;
  std::deque<DeferredLoad> deferred_;  // guarded by deferred_mu_
  uint64_t deferred_running_ = 0;      // session of the load the thread runs; 0 = none
  bool deferred_stop_ = false;
  std::thread deferred_thread_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_JOBS_JOB_MANAGER_H_
