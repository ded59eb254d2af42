// Helpers shared by the RPC benchmarks: a Control stub on its own connection to the
// daemon's Unix socket, sessions and opaque namespaces, 32-byte keys, host-mode stores
// through the mapped shared region, latency percentiles, and a monotonic clock.
//
// Thread safety: the free functions are thread-safe; a stub may be shared (gRPC stubs
// are thread-safe) but the benchmarks give each thread its own.
#ifndef KVSTRATA_BENCH_RPC_RPC_BENCH_UTIL_H_
#define KVSTRATA_BENCH_RPC_RPC_BENCH_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cpp/shm_region_client.h"
#include "kvstrata/v1/control.grpc.pb.h"

namespace kvstrata::bench {

using Stub = v1::Control::Stub;

// A stub on a channel of its own (local subchannel pool: its own socket connection).
std::unique_ptr<Stub> NewControlStub(const std::string& socket_path);

// Unary call with a 30 s deadline; the gRPC status as absl::Status.
template <typename Request, typename Response>
absl::StatusOr<Response> Call(Stub& stub,
                              grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                           Response*),
                              const Request& request);
// Same, into a caller-owned response that is reused from call to call (a cleared protobuf
// message keeps its repeated elements, so parsing 1,000 locations or slots allocates
// nothing after the first call), as a long-lived connector would do.
template <typename Request, typename Response>
absl::Status CallInto(Stub& stub,
                      grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                      const Request& request, Response* response);
absl::Status ToAbsl(const grpc::Status& status);

// A session with a long heartbeat deadline (the benchmarks do not heartbeat).
absl::StatusOr<v1::OpenSessionResponse> OpenSession(Stub& stub, const std::string& name);
// Registers an opaque namespace of `block_bytes` per block; returns its id.
absl::StatusOr<uint32_t> RegisterOpaqueNamespace(Stub& stub, uint64_t session, uint64_t block_bytes,
                                                 const std::string& salt);

// `count` distinct 32-byte keys derived from (`stream`, index).
std::vector<std::string> MakeKeys(uint64_t stream, size_t count);

// Host-mode store of keys[i] <- src + i * block_bytes: ReserveStore, memcpy into the
// reserved slots, CommitStore. Returns the number of blocks committed.
absl::StatusOr<size_t> StoreBatch(Stub& stub, uint64_t session, uint32_t ns,
                                  const std::vector<std::string>& keys, const MappedRegion& region,
                                  const char* src, uint64_t block_bytes);
// Host-mode load of keys[i] -> dst + i * block_bytes: AcquireLoad, memcpy out of the READY
// slots, ReleaseLoad. Returns the number of blocks copied.
absl::StatusOr<size_t> LoadBatch(Stub& stub, uint64_t session, uint32_t ns,
                                 const std::vector<std::string>& keys, const MappedRegion& region,
                                 char* dst, uint64_t block_bytes);

// Reads one byte per page of the region so that later copies do not take page faults
// (a long-running connector has its mapping warm). Returns the seconds it took.
double PrefaultRegion(const MappedRegion& region);

struct Latency {
  double p50_us = 0, p99_us = 0, mean_us = 0;
};
Latency Summarize(std::vector<double> micros);

double NowSeconds();

// ---- implementation of the template
template <typename Request, typename Response>
absl::StatusOr<Response> Call(Stub& stub,
                              grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                           Response*),
                              const Request& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  Response response;
  grpc::Status status = (stub.*method)(&context, request, &response);
  if (!status.ok()) return ToAbsl(status);
  return response;
}

template <typename Request, typename Response>
absl::Status CallInto(Stub& stub,
                      grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                      const Request& request, Response* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status status = (stub.*method)(&context, request, response);
  return status.ok() ? absl::OkStatus() : ToAbsl(status);
}

}  // namespace kvstrata::bench

#endif  // KVSTRATA_BENCH_RPC_RPC_BENCH_UTIL_H_
