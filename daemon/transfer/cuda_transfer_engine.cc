// Lifecycle, devices and Submit of CudaTransferEngine; registration is in
// cuda_registration.cc.
#include "daemon/transfer/cuda_transfer_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/transfer/copy_calibration.h"
#include "daemon/transfer/cuda_util.h"
#include "daemon/transfer/transfer_validation.h"

namespace kvstrata {

absl::StatusOr<std::unique_ptr<TransferEngine>> TransferEngine::Create(
    TransferEngineOptions options) {
  absl::StatusOr<std::unique_ptr<CudaTransferEngine>> engine =
      CudaTransferEngine::CreateCuda(options);
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<TransferEngine>(std::move(*engine));
}

absl::StatusOr<std::unique_ptr<CudaTransferEngine>> CudaTransferEngine::CreateCuda(
    TransferEngineOptions options) {
  if (options.host_base == nullptr || options.host_bytes == 0) {
    return absl::InvalidArgumentError("TransferEngine needs the L1 region (host_base, host_bytes)");
  }
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: ", error != cudaSuccess ? cudaGetErrorString(error) : "none visible"));
  }
  std::unique_ptr<CudaTransferEngine> engine(new CudaTransferEngine(options));
  absl::Status status = engine->InitHost();
  for (int i = 0; status.ok() && i < count; ++i) status = engine->InitDevice(i);
  if (!status.ok()) return status;
  return engine;
}

CudaTransferEngine::CudaTransferEngine(TransferEngineOptions options) : options_(options) {}

absl::Status CudaTransferEngine::InitHost() {
  cudaError_t error = cudaHostRegister(options_.host_base, options_.host_bytes,
                                       cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (error != cudaSuccess) return CudaError(error, "cudaHostRegister(L1 region)");
  host_registered_ = true;
  return absl::OkStatus();
}

absl::Status CudaTransferEngine::InitDevice(int index) {
  Device device;
  device.index = index;
  cudaError_t error = cudaSetDevice(index);
  cudaDeviceProp prop{};
  if (error == cudaSuccess) error = cudaGetDeviceProperties(&prop, index);
  if (error != cudaSuccess) return CudaError(error, "cudaGetDeviceProperties");
  device.uuid = FormatGpuUuid(prop.uuid);
  // Half the SMs: a load kernel and a store kernel then run side by side (copy_bench's
  // "both" rows), and 66 blocks on an H100 keep enough bytes in flight to fill PCIe.
  device.grid_blocks = std::max(8, prop.multiProcessorCount / 2);
  void* mapped = nullptr;
  error = cudaHostGetDevicePointer(&mapped, options_.host_base, 0);
  if (error != cudaSuccess) return CudaError(error, "cudaHostGetDevicePointer(L1 region)");
  device.host_device_base = reinterpret_cast<uint64_t>(mapped);
  device.staged_max_piece_bytes = options_.kernel_max_piece_bytes;
  device.copy_choice =
      absl::StrCat("device=", index, " staged_max_piece_bytes=", options_.kernel_max_piece_bytes,
                   " (configured)");
  double bytes_per_us = 0;  // GB/s * 1e9 / 1e6.
  if (options_.calibrate) {
    absl::StatusOr<CopyCalibration> calibrated = CalibrateLoads(index, device.grid_blocks);
    if (calibrated.ok()) {
      bytes_per_us = calibrated->FastestGbps() * 1e3;
      device.staged_max_piece_bytes = calibrated->staged_max_piece_bytes;
      device.copy_choice = absl::StrCat(calibrated->Summary(), " (calibrated)");
    } else {
      absl::StrAppend(&device.copy_choice, "; calibration failed: ", calibrated.status().message());
    }
  }
  int least = 0;
  int greatest = 0;
  error = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (error != cudaSuccess) return CudaError(error, "cudaDeviceGetStreamPriorityRange");
  absl::StatusOr<std::unique_ptr<CudaLane>> load =
      CudaLane::Create(index, greatest, options_.copy_streams, bytes_per_us);
  if (!load.ok()) return load.status();
  absl::StatusOr<std::unique_ptr<CudaLane>> store =
      // Device to host: as fast on the GPUs measured so far (the ceilings in
      // bench/results/h100-2026-11-21/NOTES.md).
      CudaLane::Create(index, least, options_.copy_streams, bytes_per_us);
  if (!store.ok()) return store.status();
  device.load_lane = std::move(*load);
  device.store_lane = std::move(*store);
  devices_.push_back(std::move(device));
  return absl::OkStatus();
}

CudaTransferEngine::~CudaTransferEngine() {
  {
    MutexLock lock(&mu_);
    for (auto& [id, reg] : registrations_) {
      WaitIdle(reg.get());
      Release(reg.get());
    }
    registrations_.clear();
  }
  devices_.clear();  // Lanes finish queued jobs first.
  if (host_registered_) cudaHostUnregister(options_.host_base);
}

std::vector<std::string> CudaTransferEngine::CopyChoices() const {
  std::vector<std::string> choices;
  for (const Device& device : devices_) choices.push_back(device.copy_choice);
  return choices;
}

absl::StatusOr<int> CudaTransferEngine::DeviceByUuid(const std::string& uuid) const {
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].uuid == uuid) return static_cast<int>(i);
  }
  return absl::NotFoundError(absl::StrCat("no GPU with uuid ", uuid, " on this host"));
}

void CudaTransferEngine::WaitIdle(Registration* reg) {
  idle_.Wait(&mu_, [reg]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return reg->in_flight == 0; });
}

absl::Status CudaTransferEngine::Unregister(SessionId session, RegistrationId registration) {
  MutexLock lock(&mu_);
  auto it = registrations_.find(registration);
  if (it == registrations_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown registration ", registration));
  }
  if (it->second->session != session) {
    return absl::FailedPreconditionError(
        absl::StrCat("registration ", registration, " belongs to another session"));
  }
  std::shared_ptr<Registration> reg = std::move(it->second);
  registrations_.erase(it);
  reg->ending->store(true);
  WaitIdle(reg.get());
  Release(reg.get());
  return absl::OkStatus();
}

void CudaTransferEngine::EndSession(SessionId session) {
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Registration>> ended;
  for (auto it = registrations_.begin(); it != registrations_.end();) {
    if (it->second->session == session) {
      ended.push_back(std::move(it->second));
      it = registrations_.erase(it);
    } else {
      ++it;
    }
  }
  for (const std::shared_ptr<Registration>& reg : ended) reg->ending->store(true);
  for (const std::shared_ptr<Registration>& reg : ended) {
    WaitIdle(reg.get());
    Release(reg.get());
  }
}

absl::StatusOr<std::shared_ptr<CudaTransferEngine::Registration>> CudaTransferEngine::Acquire(
    SessionId session, const TransferRequest& request) {
  MutexLock lock(&mu_);
  auto it = registrations_.find(request.registration);
  if (it == registrations_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown registration ", request.registration));
  }
  Registration& reg = *it->second;
  if (reg.session != session) {
    return absl::FailedPreconditionError(
        absl::StrCat("registration ", request.registration, " belongs to another session"));
  }
  RequestLimits limits{reg.num_blocks,
                       reg.events.size(),
                       reg.block_bytes,
                       options_.host_bytes,
                       options_.max_blocks_per_transfer,
                       reg.layer_flags != 0};
  absl::Status status = ValidateRequest(request, limits);
  if (!status.ok()) return status;
  ++reg.in_flight;
  return it->second;
}

void CudaTransferEngine::Finish(Registration* reg) {
  MutexLock lock(&mu_);
  --reg->in_flight;
  idle_.SignalAll();  // Under mu_: a waiting destructor must not free idle_ before this.
}

LaneJob CudaTransferEngine::MakeJob(const Registration& reg, TransferRequest request,
                                    std::function<void(TransferResult)> done) const {
  const Device& device = devices_[reg.device];
  LaneJob job;
  job.launch.strategy = ResolveStrategy(options_.copy_strategy, request.direction,
                                        reg.max_piece_bytes, device.staged_max_piece_bytes);
  job.launch.direction = request.direction;
  job.launch.grid_blocks = device.grid_blocks;
  if (job.launch.strategy == CopyStrategy::kStaged && reg.block_bytes > kStagingBufferBytes) {
    job.launch.strategy = CopyStrategy::kBatch;  // A block must fit the staging buffer.
  }
  const bool layered = request.layer_flag_value.has_value();
  if (layered && job.launch.strategy != CopyStrategy::kMemcpyLoop) {
    // Staging moves whole blocks (every layer at once), a kernel's descriptors are one
    // buffer per run, and a kernel in this process would time-slice the GPU with the
    // engine's forward pass: layer by layer, the pieces go by DMA on the copy engines.
    job.launch.strategy = CopyStrategy::kBatch;
  }
  uint64_t host_base = job.launch.strategy == CopyStrategy::kKernel
                           ? device.host_device_base
                           : reinterpret_cast<uint64_t>(options_.host_base);
  job.num_blocks = request.blocks.size();
  // The registration's tensors stay valid while the job is in flight (in_flight > 0).
  auto blocks = std::make_shared<const std::vector<BlockCopy>>(std::move(request.blocks));
  const std::vector<TensorLayout>* tensors = &reg.tensors;
  job.plan = [tensors, blocks, host_base, block_bytes = reg.block_bytes,
              layered](LaneJob& planned) {
    if (layered) {
      planned.pieces = PlanLayerCopies(*tensors, *blocks, host_base, &planned.layer_bounds);
    } else if (planned.launch.strategy == CopyStrategy::kStaged) {
      planned.staged = PlanStagedSlots(*blocks, host_base, block_bytes);
    } else {
      planned.pieces = PlanCopies(*tensors, *blocks, host_base);
    }
  };
  if (job.launch.strategy == CopyStrategy::kStaged) {  // Never layer-wise (see above).
    job.plan_blocks = [tensors, blocks](LaneJob& planned, size_t first, size_t end) {
      PlanStagedBlocks(*tensors, *blocks, first, end, &planned.staged);
    };
  }
  if (request.wait_event.has_value()) job.wait_event = reg.events[*request.wait_event];
  if (layered) {
    job.layer_flags = reg.layer_flags;
    job.layer_flag_value = *request.layer_flag_value;
  }
  job.abandon = reg.ending;
  job.done = std::move(done);
  return job;
}

absl::Status CudaTransferEngine::Submit(SessionId session, TransferRequest request,
                                        std::function<void(TransferResult)> done) {
  absl::StatusOr<std::shared_ptr<Registration>> reg = Acquire(session, request);
  if (!reg.ok()) return reg.status();
  std::shared_ptr<Registration> held = std::move(*reg);
  auto finish = [this, held, done = std::move(done)](TransferResult result) {
    done(std::move(result));
    Finish(held.get());
  };
  const bool load = request.direction == CopyDirection::kUp;
  LaneJob job = MakeJob(*held, std::move(request), std::move(finish));
  Device& device = devices_[held->device];
  CudaLane* lane = load ? device.load_lane.get() : device.store_lane.get();
  lane->Enqueue(std::move(job));
  return absl::OkStatus();
}

}  // namespace kvstrata
