#include "daemon/transfer/cuda_lane.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/transfer/cuda_util.h"

namespace kvstrata {
namespace {

TransferResult FailAll(size_t num_blocks, const CopyError& error) {
  TransferResult result;
  result.failed.reserve(num_blocks);
  for (size_t i = 0; i < num_blocks; ++i) result.failed.push_back(static_cast<uint32_t>(i));
  result.error = absl::StrCat(error.call, ": ", cudaGetErrorString(error.error));
  return result;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaLane>> CudaLane::Create(int device, int priority, size_t streams,
                                                           double bytes_per_us) {
  if (streams < 1 || streams > kMaxStreams) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy streams must be in [1, ", kMaxStreams, "], not ", streams));
  }
  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaError(error, "cudaSetDevice");
  std::vector<cudaStream_t> created;  // The copy streams, then the kernel stream.
  for (size_t i = 0; i <= streams; ++i) {
    cudaStream_t stream = nullptr;
    error = cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority);
    if (error != cudaSuccess) {
      for (cudaStream_t s : created) cudaStreamDestroy(s);
      return CudaError(error, "cudaStreamCreateWithPriority");
    }
    created.push_back(stream);
  }
  cudaStream_t scatter = created.back();
  created.pop_back();
  std::unique_ptr<CudaLane> lane(new CudaLane(device, std::move(created), scatter));
  lane->fastest_bytes_per_us_ = std::max(0.0, bytes_per_us);
  absl::Status status = lane->InitSlots();
  if (!status.ok()) return status;
  lane->issuer_ = std::thread([raw = lane.get()] { raw->IssueLoop(); });
  lane->completer_ = std::thread([raw = lane.get()] { raw->CompleteLoop(); });
  return lane;
}

CudaLane::CudaLane(int device, std::vector<cudaStream_t> streams, cudaStream_t scatter)
    : device_(device), streams_(std::move(streams)), scatter_stream_(scatter) {}

absl::Status CudaLane::InitSlots() {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < kSlots; ++i) {
    // The completion thread polls `event` (WaitForJob); both time the job on the GPU
    // (TransferTimings::gpu_us).
    cudaError_t error = cudaEventCreate(&slots_[i].event);
    if (error == cudaSuccess) error = cudaEventCreate(&slots_[i].started);
    if (error != cudaSuccess) return CudaError(error, "cudaEventCreate");
    for (size_t run = 1; run < streams_.size(); ++run) {
      error = cudaEventCreateWithFlags(&slots_[i].joined[run], cudaEventDisableTiming);
      if (error != cudaSuccess) return CudaError(error, "cudaEventCreateWithFlags(join)");
    }
    error = cudaEventCreateWithFlags(&slots_[i].layer_done, cudaEventDisableTiming);
    if (error != cudaSuccess) return CudaError(error, "cudaEventCreateWithFlags(layer)");
    free_slots_.push_back(i);
  }
  return absl::OkStatus();
}

CudaLane::~CudaLane() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.SignalAll();
  if (issuer_.joinable()) issuer_.join();
  if (completer_.joinable()) completer_.join();
  cudaSetDevice(device_);
  for (Slot& slot : slots_) {
    if (slot.event != nullptr) cudaEventDestroy(slot.event);
    if (slot.started != nullptr) cudaEventDestroy(slot.started);
    if (slot.layer_done != nullptr) cudaEventDestroy(slot.layer_done);
    for (cudaEvent_t joined : slot.joined) {
      if (joined != nullptr) cudaEventDestroy(joined);
    }
  }
  for (cudaStream_t stream : streams_) cudaStreamDestroy(stream);
  cudaStreamDestroy(scatter_stream_);
}

void CudaLane::Enqueue(LaneJob job) {
  job.enqueued = std::chrono::steady_clock::now();
  size_t slot = 0;
  bool now = false;
  {
    MutexLock lock(&mu_);
    // A load that waits for nothing, to an idle lane: issued on this thread, which spares it
    // the issue thread's wake-up (~50 us on a virtual machine).
    now = job.launch.direction == CopyDirection::kUp && job.wait_event == nullptr && !issuing_ &&
          !stopping_ && queue_.empty() && !free_slots_.empty();
    if (now) {
      issuing_ = true;
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      queue_.push_back(std::move(job));
    }
  }
  if (now) {
    cudaSetDevice(device_);
    IssueTaken(std::move(job), slot);
  }
  changed_.SignalAll();
}

void CudaLane::IssueTaken(LaneJob job, size_t slot) {
  CopyError error = Issue(job, slots_[slot]);
  MutexLock lock(&mu_);
  issued_.push_back({std::move(job), slot, error});
  issuing_ = false;
}

void CudaLane::IssueLoop() {
  cudaSetDevice(device_);
  while (true) {
    LaneJob job;
    size_t slot = 0;
    {
      MutexLock lock(&mu_);
      changed_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !issuing_ &&
               ((!queue_.empty() && !free_slots_.empty()) || (stopping_ && queue_.empty()));
      });
      if (queue_.empty()) {
        issue_done_ = true;
        break;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
      slot = free_slots_.back();
      free_slots_.pop_back();
      issuing_ = true;
    }
    IssueTaken(std::move(job), slot);
    changed_.SignalAll();
  }
  changed_.SignalAll();
}

namespace {

// Polls the engine's event from this thread. A GPU-side cudaStreamWaitEvent on the event of
// an engine that died before recording it would block the lane's stream forever.
CopyError WaitForEngineEvent(const LaneJob& job) {
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(kEngineEventWaitLimitSeconds);
  while (true) {
    cudaError_t state = cudaEventQuery(job.wait_event);
    if (state == cudaSuccess) return {};
    if (state != cudaErrorNotReady) return {state, "cudaEventQuery(engine event)"};
    if (job.abandon != nullptr && job.abandon->load()) {
      return {cudaErrorNotReady, "waiting for the engine's event (its session ended)"};
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return {cudaErrorNotReady, "waiting for the engine's event (time limit)"};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace

CopyError CudaLane::Issue(LaneJob& job, Slot& slot) {
  job.taken = std::chrono::steady_clock::now();
  if (job.plan) job.plan(job);
  job.planned = std::chrono::steady_clock::now();
  job.issued = job.planned;  // Until the copies are issued.
  if (job.wait_event != nullptr) {
    CopyError waited = WaitForEngineEvent(job);
    if (!waited.ok()) return waited;
  }
  cudaError_t started = cudaEventRecord(slot.started, streams_[0]);
  if (started != cudaSuccess) return {started, "cudaEventRecord(start)"};
  CopyError error;
  if (job.layer_flags != 0) {
    error = IssueLayers(job, slot);
  } else if (job.launch.strategy == CopyStrategy::kStaged) {
    error = IssueStaged(job, slot);
  } else {
    error = IssueRuns(job, slot, job.pieces, kMinPartBytes);
  }
  if (!error.ok()) return error;
  cudaError_t record = cudaEventRecord(slot.event, streams_[0]);
  if (record != cudaSuccess) return {record, "cudaEventRecord"};
  job.issued = std::chrono::steady_clock::now();
  return {};
}

CopyError CudaLane::IssueStaged(LaneJob& job, Slot& slot) {
  PlanBlocks plan_blocks;
  if (job.plan_blocks) {
    plan_blocks = [&job](size_t first, size_t end) { job.plan_blocks(job, first, end); };
  }
  return IssueStagedCopies(job.launch, job.staged, &slot.scratch[0], streams_[0], scatter_stream_,
                           plan_blocks);
}

CopyError CudaLane::IssueLayers(LaneJob& job, Slot& slot) {
  const absl::Span<const PieceCopy> pieces(job.pieces);
  for (size_t layer = 0; layer + 1 < job.layer_bounds.size(); ++layer) {
    const size_t first = job.layer_bounds[layer];
    const size_t end = job.layer_bounds[layer + 1];
    CopyError error = IssueRuns(job, slot, pieces.subspan(first, end - first), kMinLayerPartBytes);
    if (!error.ok()) return error;
    cudaError_t flag =
        StreamWriteValue64(streams_[0], job.layer_flags + 8 * layer, job.layer_flag_value);
    if (flag != cudaSuccess) return {flag, "cuStreamWriteValue64(layer flag)"};
    // The other streams start the next layer only once this one landed: with every layer
    // queued at once (2-D copies issue fast), the copy engines would otherwise run later
    // layers of streams 1.. ahead of layer 0 and the engine's first layer would wait.
    if (streams_.size() > 1 && layer + 2 < job.layer_bounds.size()) {
      cudaError_t gate = cudaEventRecord(slot.layer_done, streams_[0]);
      for (size_t s = 1; gate == cudaSuccess && s < streams_.size(); ++s) {
        gate = cudaStreamWaitEvent(streams_[s], slot.layer_done, 0);
      }
      if (gate != cudaSuccess) return {gate, "ordering the layers"};
    }
  }
  return {};
}

CopyError CudaLane::IssueRuns(LaneJob& job, Slot& slot, absl::Span<const PieceCopy> pieces,
                              uint64_t min_part_bytes) {
  if (job.launch.strategy == CopyStrategy::kBatch) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::vector<StridedCopy>> runs =
        PartitionStrided(GroupStrided(pieces), streams_.size(), min_part_bytes);
    job.grouping.group_us += std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
    for (const std::vector<StridedCopy>& run : runs) {
      for (const StridedCopy& c : run) {
        ++(c.rows > 1 ? job.grouping.copies_2d : job.grouping.copy_entries);
      }
    }
    for (size_t run = 0; run < runs.size(); ++run) {
      CopyError error = IssueStrided(job.launch, runs[run], &slot.scratch[run], streams_[run]);
      if (error.ok() && run > 0) error = JoinRun(slot, run);
      if (!error.ok()) return error;
    }
    return {};
  }
  std::vector<size_t> bounds = PartitionByBytes(pieces, streams_.size(), min_part_bytes);
  for (size_t run = 0; run + 1 < bounds.size(); ++run) {
    if (bounds[run] == bounds[run + 1]) continue;
    CopyError error =
        IssueCopies(job.launch, pieces.subspan(bounds[run], bounds[run + 1] - bounds[run]),
                    &slot.scratch[run], streams_[run]);
    if (error.ok() && run > 0) error = JoinRun(slot, run);
    if (!error.ok()) return error;
  }
  return {};
}

CopyError CudaLane::JoinRun(Slot& slot, size_t run) {
  cudaError_t joined = cudaEventRecord(slot.joined[run], streams_[run]);
  if (joined == cudaSuccess) joined = cudaStreamWaitEvent(streams_[0], slot.joined[run], 0);
  if (joined != cudaSuccess) return {joined, "joining the copy streams"};
  return {};
}

namespace {

// The job's event, queried without sleeping for kCompletionSpinMicros, then every
// kCompletionPollMicros (see there).
cudaError_t WaitForJob(cudaEvent_t event) {
  const auto spin_end =
      std::chrono::steady_clock::now() + std::chrono::microseconds(kCompletionSpinMicros);
  while (true) {
    cudaError_t state = cudaEventQuery(event);
    if (state != cudaErrorNotReady) return state;
    if (std::chrono::steady_clock::now() < spin_end) {
      std::this_thread::yield();  // Never sleeps; lets the lane's other threads in.
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(kCompletionPollMicros));
  }
}

}  // namespace

void CudaLane::CompleteLoop() {
  cudaSetDevice(device_);
  // Sleeps of kCompletionPollMicros, not the default 50 us timer slack more.
  prctl(PR_SET_TIMERSLACK, 5000UL, 0, 0, 0);
  while (true) {
    Issued issued;
    {
      MutexLock lock(&mu_);
      changed_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !issued_.empty() || issue_done_;
      });
      if (issued_.empty()) break;
      issued = std::move(issued_.front());
      issued_.pop_front();
    }
    Complete(std::move(issued));
  }
}

void CudaLane::Complete(Issued issued) {
  const auto picked_up = std::chrono::steady_clock::now();
  CopyError error = issued.error;
  const LaneJob& job = issued.job;
  uint64_t bytes = job.staged.slots.size() * job.staged.block_bytes;  // kStaged, or:
  for (const PieceCopy& p : job.pieces) bytes += p.bytes;
  if (error.ok() && fastest_bytes_per_us_ > 0 && bytes >= kMinPartBytes) {
    // Its copies started at `planned` at the earliest (later behind earlier jobs).
    const double expected_us = bytes / fastest_bytes_per_us_;
    const double sleep_us =
        std::max(kCompletionSleepShare * expected_us, expected_us - kCompletionLeadMicros);
    std::this_thread::sleep_until(job.planned +
                                  std::chrono::microseconds(static_cast<int64_t>(sleep_us)));
  }
  if (error.ok()) {
    cudaError_t sync = WaitForJob(slots_[issued.slot].event);
    if (sync != cudaSuccess) error = {sync, "cudaEventQuery"};
  } else {
    // Copies enqueued before the failing call may still use the slot's buffers.
    for (cudaStream_t stream : streams_) cudaStreamSynchronize(stream);
    cudaStreamSynchronize(scatter_stream_);
  }
  const auto synced = std::chrono::steady_clock::now();
  {
    MutexLock lock(&mu_);
    free_slots_.push_back(issued.slot);
  }
  changed_.SignalAll();
  TransferResult result = error.ok() ? TransferResult{} : FailAll(job.num_blocks, error);
  auto us = [](auto from, auto to) {
    return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
  };
  result.timings = {us(job.enqueued, job.taken), us(job.taken, job.planned),
                    us(job.planned, job.issued), us(job.issued, picked_up), us(job.issued, synced)};
  float gpu_ms = 0;
  if (error.ok() && cudaEventElapsedTime(&gpu_ms, slots_[issued.slot].started,
                                         slots_[issued.slot].event) == cudaSuccess) {
    result.timings.gpu_us = static_cast<int64_t>(gpu_ms * 1000);
    result.timings.group_us = job.grouping.group_us;
    result.timings.copies_2d = job.grouping.copies_2d;
    result.timings.copy_entries = job.grouping.copy_entries;
    if (bytes >= kMinPartBytes && result.timings.gpu_us > 0) {
      fastest_bytes_per_us_ =
          std::max(fastest_bytes_per_us_, static_cast<double>(bytes) / result.timings.gpu_us);
    }
  }
  issued.job.done(std::move(result));
}

}  // namespace kvstrata
