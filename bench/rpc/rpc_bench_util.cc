#include "bench/rpc/rpc_bench_util.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "tests/integration/proto_specs.h"

namespace kvstrata::bench {

std::unique_ptr<Stub> NewControlStub(const std::string& socket_path) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  auto channel =
      grpc::CreateCustomChannel("unix:" + socket_path, grpc::InsecureChannelCredentials(), args);
  return v1::Control::NewStub(channel);
}

absl::Status ToAbsl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::string_view(status.error_message()));
}

absl::StatusOr<v1::OpenSessionResponse> OpenSession(Stub& stub, const std::string& name) {
  v1::OpenSessionRequest request;
  request.set_client_name(name);
  request.set_pid(static_cast<uint32_t>(getpid()));
  request.set_hostname("localhost");
  request.set_heartbeat_timeout_ms(300000);
  return Call(stub, &Stub::OpenSession, request);
}

absl::StatusOr<uint32_t> RegisterOpaqueNamespace(Stub& stub, uint64_t session, uint64_t block_bytes,
                                                 const std::string& salt) {
  v1::RegisterNamespaceRequest request;
  request.set_session_id(session);
  *request.mutable_spec() = testing::OpaqueSpec("kvstrata-bench", block_bytes, salt);
  absl::StatusOr<v1::RegisterNamespaceResponse> response =
      Call(stub, &Stub::RegisterNamespace, request);
  if (!response.ok()) return response.status();
  if (response->bytes_per_block() != block_bytes) {
    return absl::InternalError(absl::StrCat("namespace has ", response->bytes_per_block(),
                                            " bytes per block, asked for ", block_bytes));
  }
  return response->namespace_id();
}

std::vector<std::string> MakeKeys(uint64_t stream, size_t count) {
  std::vector<std::string> keys(count, std::string(32, '\0'));
  for (size_t i = 0; i < count; ++i) {
    uint64_t words[4] = {stream, i, stream ^ 0x9e3779b97f4a7c15ull, i * 0xbf58476d1ce4e5b9ull};
    std::memcpy(keys[i].data(), words, sizeof(words));
  }
  return keys;
}

absl::StatusOr<size_t> StoreBatch(Stub& stub, uint64_t session, uint32_t ns,
                                  const std::vector<std::string>& keys, const MappedRegion& region,
                                  const char* src, uint64_t block_bytes) {
  v1::ReserveStoreRequest reserve;
  reserve.set_session_id(session);
  reserve.set_namespace_id(ns);
  for (const std::string& key : keys) reserve.add_keys(key);
  absl::StatusOr<v1::ReserveStoreResponse> reserved = Call(stub, &Stub::ReserveStore, reserve);
  if (!reserved.ok()) return reserved.status();
  if (reserved->reservation_id() == 0) return 0;
  for (int i = 0; i < reserved->slots_size(); ++i) {
    const v1::SlotRef& slot = reserved->slots(i);
    if (slot.state() != v1::SlotRef::STATE_RESERVED) continue;
    char* to = region.At(slot.offset(), block_bytes);
    if (to == nullptr || slot.length() != block_bytes) {
      return absl::InternalError(absl::StrCat("bad slot ", slot.offset(), "+", slot.length()));
    }
    std::memcpy(to, src + i * block_bytes, block_bytes);
  }
  v1::CommitStoreRequest commit;
  commit.set_session_id(session);
  commit.set_reservation_id(reserved->reservation_id());
  absl::StatusOr<v1::CommitStoreResponse> committed = Call(stub, &Stub::CommitStore, commit);
  if (!committed.ok()) return committed.status();
  return committed->committed_blocks();
}

absl::StatusOr<size_t> LoadBatch(Stub& stub, uint64_t session, uint32_t ns,
                                 const std::vector<std::string>& keys, const MappedRegion& region,
                                 char* dst, uint64_t block_bytes) {
  v1::AcquireLoadRequest acquire;
  acquire.set_session_id(session);
  acquire.set_namespace_id(ns);
  for (const std::string& key : keys) acquire.add_keys(key);
  absl::StatusOr<v1::AcquireLoadResponse> load = Call(stub, &Stub::AcquireLoad, acquire);
  if (!load.ok()) return load.status();
  size_t copied = 0;
  for (int i = 0; i < load->slots_size(); ++i) {
    const v1::SlotRef& slot = load->slots(i);
    if (slot.state() != v1::SlotRef::STATE_READY) continue;
    const char* from = region.At(slot.offset(), block_bytes);
    if (from == nullptr || slot.length() != block_bytes) {
      return absl::InternalError(absl::StrCat("bad slot ", slot.offset(), "+", slot.length()));
    }
    std::memcpy(dst + i * block_bytes, from, block_bytes);
    ++copied;
  }
  if (load->load_id() != 0) {
    v1::ReleaseLoadRequest release;
    release.set_session_id(session);
    release.set_load_id(load->load_id());
    absl::StatusOr<v1::ReleaseLoadResponse> released = Call(stub, &Stub::ReleaseLoad, release);
    if (!released.ok()) return released.status();
  }
  return copied;
}

double PrefaultRegion(const MappedRegion& region) {
  double start = NowSeconds();
  const long page = sysconf(_SC_PAGESIZE);
  uint64_t sum = 0;
  for (uint64_t offset = 0; offset < region.size(); offset += page) sum += region.data()[offset];
  volatile uint64_t sink = sum;  // keeps the reads
  (void)sink;
  return NowSeconds() - start;
}

Latency Summarize(std::vector<double> micros) {
  Latency latency;
  if (micros.empty()) return latency;
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) { return micros[static_cast<size_t>(q * (micros.size() - 1))]; };
  latency.p50_us = at(0.50);
  latency.p99_us = at(0.99);
  double sum = 0;
  for (double m : micros) sum += m;
  latency.mean_us = sum / micros.size();
  return latency;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace kvstrata::bench
