// One direction of one GPU: `streams` non-blocking streams and two threads. The issue
// thread takes queued jobs in order (a load to an idle lane is issued by Enqueue's caller
// instead) and, once the engine's event completed, cuts each job into up to `streams` runs of
// about equal bytes (none under kMinPartBytes) and enqueues each run on its own stream, so one
// engine request keeps several copy engines busy as many requests would; the other streams'
// ends are joined into the first, where the job's event is recorded. The completion thread
// waits for those events in order (polling every kCompletionPollMicros) and runs each job's
// `done` exactly once, after every run landed. A staged job is one run, whose kernels go on a
// stream of their own (`scatter_stream_`), joined into its copy stream, so that its DMAs and
// kernels overlap; a staged load's first DMAs are issued before its pieces are planned. A
// layer-wise load is issued layer by layer, each layer cut into runs as above and joined, then
// its flag word written on the first stream. Up to kSlots jobs are in flight, so issuing the
// next transfer overlaps the copies of the previous ones. CUDA build only. Thread-safe.
#ifndef KVSTRATA_DAEMON_TRANSFER_CUDA_LANE_H_
#define KVSTRATA_DAEMON_TRANSFER_CUDA_LANE_H_

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/common/mutex.h"
#include "daemon/transfer/cond_var.h"
#include "daemon/transfer/cuda_copy.h"

namespace kvstrata {

inline constexpr int kEngineEventWaitLimitSeconds = 30;
// The completion thread polls a job's event instead of sleeping in cudaEventSynchronize: a
// thread that slept for a whole job (tens of ms) wakes 0.1-0.3 ms after the GPU finished on a
// virtual machine, whose idle vCPUs sleep deep. Of the time the job would take at the lane's
// fastest rate (the start's calibration, or faster jobs since) it first sleeps through
// kCompletionSleepShare, or all but kCompletionLeadMicros where that is longer (a long job is
// not spun through its last tenth), then queries the event without sleeping for up to
// kCompletionSpinMicros (a sleep between queries costs its wake-up, ~10-30 us), then every
// kCompletionPollMicros.
inline constexpr int kCompletionPollMicros = 20;
inline constexpr int kCompletionSpinMicros = 2000;
inline constexpr int kCompletionLeadMicros = 500;
inline constexpr double kCompletionSleepShare = 0.9;

struct LaneJob {
  CopyLaunch launch;
  // Fills `pieces` or `staged`; run by the issue thread, so that planning thousands of
  // pieces costs the submitting caller nothing.
  std::function<void(LaneJob&)> plan;
  // kStaged: `plan` fills only the slots; this adds the pieces of blocks [first, end)
  // (PlanStagedBlocks) as IssueStagedCopies needs them, the first chunk's and then the
  // rest's: a load's first DMAs (which need only the slots) move while they are planned.
  std::function<void(LaneJob&, size_t first, size_t end)> plan_blocks;
  std::vector<PieceCopy> pieces;  // Every strategy but kStaged.
  StagedPlan staged;              // kStaged.
  // The engine's event to wait for before copying (host-side polling, so a dead engine's
  // event that never completes cannot wedge the stream): the wait gives up when `abandon`
  // becomes true (its session ended) or after kEngineEventWaitLimit.
  cudaEvent_t wait_event = nullptr;
  std::shared_ptr<const std::atomic<bool>> abandon;
  // Layer-wise loads (layer_flags != 0): `pieces` grouped by layer ([layer_bounds[i],
  // layer_bounds[i+1]) is layer i, filled by `plan`); once layer i landed, the value is
  // written to the device address layer_flags + 8 * i.
  std::vector<size_t> layer_bounds;
  uint64_t layer_flags = 0;
  uint64_t layer_flag_value = 0;
  size_t num_blocks = 0;  // Reported failed as a whole on a CUDA error.
  std::function<void(TransferResult)> done;
  // Stage times (TransferTimings), set by the lane.
  std::chrono::steady_clock::time_point enqueued, taken, planned, issued;
  TransferTimings grouping;  // IssueRuns' group_us, copies_2d, copy_entries.
};

class CudaLane {
 public:
  static constexpr size_t kMaxStreams = 8;
  // `priority` as from cudaDeviceGetStreamPriorityRange; `streams` in [1, kMaxStreams].
  // `bytes_per_us`: how fast this GPU's copies went at start (calibration), 0 if unknown:
  // without it the completion thread polls from the job's start until it saw a job of its
  // own. FAILED_PRECONDITION on CUDA errors.
  static absl::StatusOr<std::unique_ptr<CudaLane>> Create(int device, int priority, size_t streams,
                                                          double bytes_per_us = 0);
  // Finishes every queued job (each `done` runs), then stops the threads.
  ~CudaLane();
  CudaLane(const CudaLane&) = delete;
  CudaLane& operator=(const CudaLane&) = delete;

  // Queues `job` for the issue thread; a load that waits for no engine event, to a lane
  // with nothing queued or being issued, is issued on the calling thread instead (blocks
  // for as long as issuing takes: planning and enqueueing its copies, not the copies).
  void Enqueue(LaneJob job);

 private:
  static constexpr size_t kSlots = 4;
  static constexpr uint64_t kMinPartBytes = 8ULL << 20;
  static constexpr uint64_t kMinLayerPartBytes = 2ULL << 20;
  struct Slot {
    cudaEvent_t event = nullptr;                    // Recorded on streams_[0]: the job is done.
    cudaEvent_t started = nullptr;                  // Recorded on streams_[0] before the copies.
    std::array<cudaEvent_t, kMaxStreams> joined{};  // [i > 0]: the end of stream i's run.
    cudaEvent_t layer_done = nullptr;               // Layer-wise: recorded after each layer's flag.
    std::array<CopyScratch, kMaxStreams> scratch;   // One per run.
  };
  struct Issued {
    LaneJob job;
    size_t slot = 0;
    CopyError error;
  };

  CudaLane(int device, std::vector<cudaStream_t> streams, cudaStream_t scatter);
  absl::Status InitSlots();
  void IssueLoop();
  // Issues a job taken off the queue (or never queued) into `slot`, hands it to the
  // completion thread and clears issuing_.
  void IssueTaken(LaneJob job, size_t slot);
  void CompleteLoop();
  CopyError Issue(LaneJob& job, Slot& slot);
  // kStaged (never layer-wise): one run of every block on streams_[0] and scatter_stream_, in
  // slot.scratch[0]: its DMAs are large and the copy engine ran several runs' DMAs one after
  // another anyway (more runs measured slower,
  // bench/results/h100-2026-11-25-wakeups/NOTES.md).
  CopyError IssueStaged(LaneJob& job, Slot& slot);
  // `pieces` cut into runs of at least `min_part_bytes`, run i on streams_[i], the other
  // streams joined into streams_[0]. kBatch groups the pieces into 2-D copies first and cuts
  // those (PartitionStrided), so that the cuts do not shorten every tensor's copies.
  CopyError IssueRuns(LaneJob& job, Slot& slot, absl::Span<const PieceCopy> pieces,
                      uint64_t min_part_bytes);
  // Joins run `run` (> 0) into streams_[0].
  CopyError JoinRun(Slot& slot, size_t run);
  // A layer-wise job: each layer's runs, then its flag word written on streams_[0].
  CopyError IssueLayers(LaneJob& job, Slot& slot);
  void Complete(Issued issued);

  const int device_;
  const std::vector<cudaStream_t> streams_;
  const cudaStream_t scatter_stream_;  // kStaged's kernels.
  std::array<Slot, kSlots> slots_;
  Mutex mu_;
  CondVar changed_;
  std::deque<LaneJob> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<Issued> issued_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> free_slots_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool issue_done_ ABSL_GUARDED_BY(mu_) = false;
  bool issuing_ ABSL_GUARDED_BY(mu_) = false;  // A job is being issued (one at a time, in order).
  // The completion thread's own: the fastest bytes per GPU microsecond (Create's, or of a job
  // of at least kMinPartBytes since; 0: none yet), for how long it sleeps before polling.
  double fastest_bytes_per_us_ = 0;
  std::thread issuer_;
  std::thread completer_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_CUDA_LANE_H_
