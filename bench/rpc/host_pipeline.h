// Host-mode store and load of many blocks in batches, as an engine connector would run
// them: optionally pipelined, with the copies on a second thread.
//
// Sequential: per batch, ReserveStore -> copy -> CommitStore (load: AcquireLoad -> copy ->
// ReleaseLoad), one after the other on the calling thread.
// Pipelined: the calling thread issues the RPCs and a copy thread moves the bytes; while
// batch N is copied, the calling thread ends batch N-1 (CommitStore / ReleaseLoad) and
// begins batch N+1 (ReserveStore / AcquireLoad). At most two batches are in flight, so at
// most 2 x batch slots are reserved or pinned at a time.
//
// Thread safety: one call at a time per stub; the functions themselves are thread-safe.
#ifndef KVSTRATA_BENCH_RPC_HOST_PIPELINE_H_
#define KVSTRATA_BENCH_RPC_HOST_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/rpc/rpc_bench_util.h"

namespace kvstrata::bench {

enum class CopyKind { kMemcpy, kStream };  // std::memcpy, or kvstrata::StreamCopy

struct TransferOptions {
  size_t batch = 64;      // blocks per RPC
  bool pipelined = true;  // copies on a second thread, overlapping the RPCs
  CopyKind copy = CopyKind::kStream;
};

struct Transfer {
  Stub* stub;
  uint64_t session;
  uint32_t ns;
  const MappedRegion* region;
  uint64_t block_bytes;
};

// keys[i] <- host + i * block_bytes (store), or keys[i] -> host + i * block_bytes (load).
// Returns the number of blocks stored (committed) or loaded (copied).
absl::StatusOr<size_t> StoreAll(const Transfer& t, const std::vector<std::string>& keys,
                                const char* host, const TransferOptions& options);
absl::StatusOr<size_t> LoadAll(const Transfer& t, const std::vector<std::string>& keys, char* host,
                               const TransferOptions& options);

// Copies `bytes` with the given routine.
void CopyBytes(CopyKind kind, void* dst, const void* src, size_t bytes);

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_RPC_HOST_PIPELINE_H_
