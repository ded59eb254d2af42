// The CUDA TransferEngine (contract in transfer_engine.h; design in docs/gpu-data-path.md).
// Per device: a load lane (stream at the greatest priority) and a store lane (the least),
// each with its own threads (cuda_lane.h). IPC memory handles are opened once per process
// (CUDA refuses a second open of the same handle) and reference-counted across
// registrations. CUDA build only. Thread-safe.
#ifndef KVSTRATA_DAEMON_TRANSFER_CUDA_TRANSFER_ENGINE_H_
#define KVSTRATA_DAEMON_TRANSFER_CUDA_TRANSFER_ENGINE_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/common/mutex.h"
#include "daemon/transfer/cond_var.h"
#include "daemon/transfer/cuda_lane.h"
#include "daemon/transfer/transfer_engine.h"

namespace kvstrata {

class CudaTransferEngine final : public TransferEngine {
 public:
  // FAILED_PRECONDITION when no device is visible or cudaHostRegister fails;
  // INVALID_ARGUMENT for an empty host region.
  static absl::StatusOr<std::unique_ptr<CudaTransferEngine>> CreateCuda(
      TransferEngineOptions options);
  // Waits for every in-flight transfer, closes all handles, unregisters the host region.
  ~CudaTransferEngine() override;

  absl::StatusOr<RegistrationId> Register(SessionId session, const CudaMemorySpec& spec,
                                          uint64_t block_bytes) override;
  absl::Status Unregister(SessionId session, RegistrationId registration) override;
  void EndSession(SessionId session) override;
  absl::Status Submit(SessionId session, TransferRequest request,
                      std::function<void(TransferResult)> done) override;

  // Like Register, for memory of this process: `allocations[i]` is the device pointer of
  // tensor i's allocation (the IPC handles in `geometry` are ignored), `events` stand in
  // for geometry.ipc_events and stay owned by the caller, `layer_flags` (device memory
  // of this process, one 8-byte word per layer, or null) for geometry.layer_flags. For
  // tests and benchmarks.
  absl::StatusOr<RegistrationId> RegisterLocalForTesting(
      SessionId session, int device, const CudaMemorySpec& geometry,
      const std::vector<void*>& allocations, uint64_t block_bytes,
      const std::vector<cudaEvent_t>& events = {}, void* layer_flags = nullptr);

  int device_count() const { return static_cast<int>(devices_.size()); }
  std::vector<std::string> CopyChoices() const override;

 private:
  struct Device {
    int index = 0;
    std::string uuid;
    int grid_blocks = 0;                  // Copy kernel grid cap.
    uint64_t host_device_base = 0;        // The host region as the device addresses it.
    uint64_t staged_max_piece_bytes = 0;  // kAuto's load threshold (options or calibrated).
    std::string copy_choice;              // For CopyChoices().
    std::unique_ptr<CudaLane> load_lane;
    std::unique_ptr<CudaLane> store_lane;
  };
  struct OpenedMemory {
    int device = 0;
    void* base = nullptr;
    int refs = 0;
    uint64_t bytes = 0;  // The allocation's real size (cuMemGetAddressRange).
  };
  struct Registration {
    SessionId session = 0;
    int device = 0;
    uint32_t num_blocks = 0;
    uint64_t block_bytes = 0;
    uint64_t max_piece_bytes = 0;
    std::vector<TensorLayout> tensors;
    uint64_t layer_flags = 0;  // Device address of the layer flag words; 0 = none.
    std::vector<cudaEvent_t> events;
    bool owns_events = false;
    std::vector<std::string> memory_keys;  // Into opened_; released with the registration.
    int in_flight = 0;                     // Guarded by the engine's mu_.
    // Set when the registration ends: queued waits for its engine's events give up.
    std::shared_ptr<std::atomic<bool>> ending = std::make_shared<std::atomic<bool>>(false);
  };

  explicit CudaTransferEngine(TransferEngineOptions options);
  absl::Status InitHost();
  absl::Status InitDevice(int index);
  absl::StatusOr<int> DeviceByUuid(const std::string& uuid) const;
  absl::Status OpenMemory(int device, const CudaMemorySpec& spec, Registration* reg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens (or references again) one IPC allocation for `reg`; its base address.
  // INVALID_ARGUMENT when `declared_bytes` (the client's allocation_bytes) exceeds the
  // allocation's real size.
  absl::StatusOr<uint64_t> OpenAllocation(int device, const IpcHandleBytes& ipc_handle,
                                          uint64_t declared_bytes, const std::string& what,
                                          Registration* reg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OpenEvents(int device, const CudaMemorySpec& spec, Registration* reg);
  void Release(Registration* reg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t Insert(std::shared_ptr<Registration> reg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<Registration>> Acquire(SessionId session,
                                                        const TransferRequest& request);
  void Finish(Registration* reg);
  void WaitIdle(Registration* reg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LaneJob MakeJob(const Registration& reg, TransferRequest request,
                  std::function<void(TransferResult)> done) const;

  const TransferEngineOptions options_;
  bool host_registered_ = false;
  std::vector<Device> devices_;
  Mutex mu_;
  CondVar idle_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, std::shared_ptr<Registration>> registrations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, OpenedMemory> opened_ ABSL_GUARDED_BY(mu_);  // Key: device + handle.
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_CUDA_TRANSFER_ENGINE_H_
