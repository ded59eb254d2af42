// Process-wide CUDA settings. Call PrepareCudaProcess first in main, before any thread
// starts (it sets environment variables) and before the first CUDA call.
#ifndef KVSTRATA_DAEMON_TRANSFER_CUDA_PROCESS_H_
#define KVSTRATA_DAEMON_TRANSFER_CUDA_PROCESS_H_

namespace kvstrata {

// Sets CUDA_DEVICE_MAX_CONNECTIONS to 32 (CUDA's maximum) unless the environment sets it;
// the runtime reads it when it makes the first context. With the default, 8 hardware queues
// per device, the daemon's 10+ streams share queues and a staged load's DMAs queued behind a
// kernel on a shared queue wait for it (an 8K-token load took 1.5-2.5 ms longer than the
// same DMAs without kernels; bench/results/h100-2026-11-25-staged-queues/NOTES.md). Harmless
// without CUDA.
void PrepareCudaProcess();

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TRANSFER_CUDA_PROCESS_H_
