#include "daemon/transfer/cuda_lane.h"

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

absl::StatusOr<std::unique_ptr<CudaLane>> CudaLane::Create(int device, int priority) {
  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaError(error, "cudaSetDevice");
  cudaStream_t stream = nullptr;
  error = cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority);
  if (error != cudaSuccess) return CudaError(error, "cudaStreamCreateWithPriority");
  std::unique_ptr<CudaLane> lane(new CudaLane(device, stream));
  absl::Status status = lane->InitSlots();
  if (!status.ok()) return status;
  lane->issuer_ = std::thread([raw = lane.get()] { raw->IssueLoop(); });
  lane->completer_ = std::thread([raw = lane.get()] { raw->CompleteLoop(); });
  return lane;
}

CudaLane::CudaLane(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

absl::Status CudaLane::InitSlots() {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < kSlots; ++i) {
    // Blocking sync: the completion thread sleeps instead of spinning on the event.
    cudaError_t error =
        cudaEventCreateWithFlags(&slots_[i].event, cudaEventDisableTiming | cudaEventBlockingSync);
    if (error != cudaSuccess) return CudaError(error, "cudaEventCreateWithFlags");
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
  }
  cudaStreamDestroy(stream_);
}

void CudaLane::Enqueue(LaneJob job) {
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(job));
  }
  changed_.SignalAll();
}

void CudaLane::IssueLoop() {
  cudaSetDevice(device_);
  while (true) {
    LaneJob job;
    size_t slot = 0;
    {
      MutexLock lock(&mu_);
      changed_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return (!queue_.empty() && !free_slots_.empty()) || (stopping_ && queue_.empty());
      });
      if (queue_.empty()) {
        issue_done_ = true;
        break;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
    CopyError error = Issue(job, slots_[slot]);
    {
      MutexLock lock(&mu_);
      issued_.push_back({std::move(job), slot, error});
    }
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
  if (job.wait_event != nullptr) {
    CopyError waited = WaitForEngineEvent(job);
    if (!waited.ok()) return waited;
  }
  CopyError error = job.launch.strategy == CopyStrategy::kStaged
                        ? IssueStagedCopies(job.launch, job.staged, &slot.scratch, stream_)
                        : IssueCopies(job.launch, job.pieces, &slot.scratch, stream_);
  if (!error.ok()) return error;
  cudaError_t record = cudaEventRecord(slot.event, stream_);
  if (record != cudaSuccess) return {record, "cudaEventRecord"};
  return {};
}

void CudaLane::CompleteLoop() {
  cudaSetDevice(device_);
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
  CopyError error = issued.error;
  if (error.ok()) {
    cudaError_t sync = cudaEventSynchronize(slots_[issued.slot].event);
    if (sync != cudaSuccess) error = {sync, "cudaEventSynchronize"};
  } else {
    // Copies enqueued before the failing call may still use the slot's buffers.
    cudaStreamSynchronize(stream_);
  }
  {
    MutexLock lock(&mu_);
    free_slots_.push_back(issued.slot);
  }
  changed_.SignalAll();
  issued.job.done(error.ok() ? TransferResult{} : FailAll(issued.job.num_blocks, error));
}

}  // namespace kvstrata
