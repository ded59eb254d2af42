// lookup_latency: Lookup of a stored 1,000-key chain on a real kvstratad over its Unix
// socket — p50/p99 latency and lookups/s with 1 and with 8 concurrent clients (threads,
// each with its own channel and session) — beside an almost empty RPC round trip
// (Control.Heartbeat) on the same socket in the same run; and the same Lookups on the
// lookup fast path (OpenSessionResponse.lookup_socket: binary frames on a persistent Unix
// socket connection per client, through client/cpp's LookupClient). Targets: p50 <= 100 us,
// p99 <= 1 ms. The chain is stored in host mode (ReserveStore, memcpy into the mapped
// region, CommitStore) in an opaque namespace of 4 KiB blocks.
//
// Usage: lookup_latency [iterations per client=3000 [fast]] ("fast": the fast-path rows only,
// with 1, 8, 64 and 128 clients)
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "bench/rpc/rpc_bench_util.h"
#include "client/cpp/lookup_client.h"
#include "tests/integration/daemon_process.h"

namespace kvstrata::bench {
namespace {

constexpr size_t kChain = 1000;
constexpr uint64_t kBlockBytes = 4096;
constexpr int kWarmup = 200;

struct Setup {
  std::string socket;
  std::vector<std::string> chain;
};

// kLookupOne: Lookup of the chain's first key alone — the floor of the Lookup path itself
// (the same callback handler, recycled messages) without the per-key work.
// kFast*: the same two Lookups on the fast path.
enum class Op { kHeartbeat, kLookupOne, kLookup, kFastLookupOne, kFastLookup };

// One client: its own channel and session, and the request it repeats.
struct Client {
  std::unique_ptr<Stub> stub;
  v1::HeartbeatRequest heartbeat;
  v1::LookupRequest lookup;
  v1::LookupRequest lookup_one;
  v1::HeartbeatResponse heartbeat_response;  // reused from call to call
  v1::LookupResponse lookup_response;        // reused from call to call
  std::unique_ptr<LookupClient> fast;        // its own fast-path connection
  FastLookupResult fast_result;              // reused from call to call
  const std::vector<std::string>* chain = nullptr;
};

absl::StatusOr<Client> Prepare(const Setup& setup) {
  Client client{NewControlStub(setup.socket), {}, {}, {}, {}, {}, nullptr, {}, &setup.chain};
  absl::StatusOr<v1::OpenSessionResponse> session = OpenSession(*client.stub, "lookup-latency");
  if (!session.ok()) return session.status();
  absl::StatusOr<uint32_t> ns =
      RegisterOpaqueNamespace(*client.stub, session->session_id(), kBlockBytes, "lookup-latency");
  if (!ns.ok()) return ns.status();
  client.fast = std::make_unique<LookupClient>(session->lookup_socket());
  client.heartbeat.set_session_id(session->session_id());
  client.lookup.set_session_id(session->session_id());
  client.lookup.set_namespace_id(*ns);
  for (const std::string& key : setup.chain) client.lookup.add_keys(key);
  client.lookup_one = client.lookup;
  client.lookup_one.mutable_keys()->DeleteSubrange(1, client.lookup_one.keys_size() - 1);
  return client;
}

absl::Status FastOnce(Client& client, Op op) {
  absl::Span<const std::string> keys(*client.chain);
  if (op == Op::kFastLookupOne) keys = keys.subspan(0, 1);
  absl::Status s = client.fast->LookupInto(client.lookup.session_id(), client.lookup.namespace_id(),
                                           keys, {}, &client.fast_result);
  if (!s.ok()) return s;
  if (client.fast_result.hit_blocks != keys.size()) return absl::InternalError("lost blocks");
  return absl::OkStatus();
}

absl::Status Once(Client& client, Op op) {
  if (op == Op::kHeartbeat) {
    return CallInto(*client.stub, &Stub::Heartbeat, client.heartbeat, &client.heartbeat_response);
  }
  if (op == Op::kFastLookup || op == Op::kFastLookupOne) return FastOnce(client, op);
  bool one = op == Op::kLookupOne;
  absl::Status s = CallInto(*client.stub, &Stub::Lookup, one ? client.lookup_one : client.lookup,
                            &client.lookup_response);
  if (!s.ok()) return s;
  if (client.lookup_response.hit_blocks() != (one ? 1 : kChain)) {
    return absl::InternalError("lookup lost blocks");
  }
  return absl::OkStatus();
}

// Warms up, waits for every client, then records `iterations` latencies (microseconds).
absl::Status RunClient(const Setup& setup, Op op, int iterations, std::latch* start,
                       std::vector<double>* micros) {
  absl::StatusOr<Client> client = Prepare(setup);
  absl::Status warm = client.status();
  for (int i = 0; warm.ok() && i < kWarmup; ++i) warm = Once(*client, op);
  start->arrive_and_wait();
  if (!warm.ok()) return warm;
  micros->reserve(iterations);
  for (int i = 0; i < iterations; ++i) {
    double t0 = NowSeconds();
    if (absl::Status s = Once(*client, op); !s.ok()) return s;
    micros->push_back((NowSeconds() - t0) * 1e6);
  }
  return absl::OkStatus();
}

const char* RowName(Op op) {
  switch (op) {
    case Op::kHeartbeat:
      return "Heartbeat (baseline)";
    case Op::kLookupOne:
      return "Lookup (1 key)";
    case Op::kLookup:
      return "Lookup (1000 keys)";
    case Op::kFastLookupOne:
      return "fast path Lookup (1 key)";
    case Op::kFastLookup:
      return "fast path Lookup (1000 keys)";
  }
  return "?";
}

// Runs `clients` threads; prints one row. Returns false on an error.
bool Measure(const Setup& setup, Op op, int clients, int iterations) {
  std::vector<std::vector<double>> micros(clients);
  std::vector<absl::Status> status(clients);
  std::latch start(clients + 1);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back(
        [&, c] { status[c] = RunClient(setup, op, iterations, &start, &micros[c]); });
  }
  start.arrive_and_wait();
  double t0 = NowSeconds();
  for (std::thread& t : threads) t.join();
  double seconds = NowSeconds() - t0;
  std::vector<double> all;
  for (int c = 0; c < clients; ++c) {
    if (!status[c].ok()) {
      std::fprintf(stderr, "client %d: %s\n", c, status[c].ToString().c_str());
      return false;
    }
    all.insert(all.end(), micros[c].begin(), micros[c].end());
  }
  Latency l = Summarize(all);
  bool lookup = op == Op::kLookup || op == Op::kFastLookup;
  std::printf("  %-28s %7d  %9.1f  %9.1f  %10.0f", RowName(op), clients, l.p50_us, l.p99_us,
              all.size() / seconds);
  if (lookup) {
    std::printf("   p50 %s  p99 %s", l.p50_us <= 100 ? "PASS" : "FAIL",
                l.p99_us <= 1000 ? "PASS" : "FAIL");
  }
  std::printf("\n");
  return true;
}

absl::Status StoreChain(const Setup& setup) {
  std::unique_ptr<Stub> stub = NewControlStub(setup.socket);
  absl::StatusOr<v1::OpenSessionResponse> session = OpenSession(*stub, "lookup-latency-store");
  if (!session.ok()) return session.status();
  absl::StatusOr<MappedRegion> region =
      MapSessionRegion(session->shm_fd_socket(), session->session_id());
  if (!region.ok()) return region.status();
  absl::StatusOr<uint32_t> ns =
      RegisterOpaqueNamespace(*stub, session->session_id(), kBlockBytes, "lookup-latency");
  if (!ns.ok()) return ns.status();
  std::vector<char> bytes(kChain * kBlockBytes, 'k');
  absl::StatusOr<size_t> stored = StoreBatch(*stub, session->session_id(), *ns, setup.chain,
                                             *region, bytes.data(), kBlockBytes);
  if (!stored.ok()) return stored.status();
  if (*stored != kChain) return absl::InternalError("the chain was not stored whole");
  return absl::OkStatus();
}

// CPUs this process may run on (taskset / cgroup cpusets), which bound the 8-client figures.
int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
}

int Main(int iterations, bool fast_only) {
  testing::DaemonProcess daemon(
      {"--set=l1.capacity=256MiB,l1.slab_size=4MiB,l2.enabled=false,log.level=warn"});
  if (absl::Status s = daemon.Start(); !s.ok()) {
    std::fprintf(stderr, "daemon: %s\n%s\n", s.ToString().c_str(), daemon.log().c_str());
    return 1;
  }
  Setup setup{daemon.socket(), MakeKeys(7, kChain)};
  if (absl::Status s = StoreChain(setup); !s.ok()) {
    std::fprintf(stderr, "store: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf(
      "kvstratad %s, Unix socket, chain of %zu keys (32 bytes), %d calls per client, "
      "%d of %u CPUs (affinity; the daemon inherits it)\n\n",
      testing::DaemonProcess::BinaryPath().c_str(), kChain, iterations, UsableCpus(),
      std::thread::hardware_concurrency());
  std::printf("  %-28s %7s  %9s  %9s  %10s   targets: p50 <= 100 us, p99 <= 1 ms\n", "call",
              "clients", "p50 (us)", "p99 (us)", "calls/s");
  bool ok = true;
  // The fast path alone also runs 64 and 128 clients: connections far beyond the CPUs.
  const std::vector<int> client_counts =
      fast_only ? std::vector<int>{1, 8, 64, 128} : std::vector<int>{1, 8};
  for (int clients : client_counts) {
    int per_client = clients == 1 ? iterations : std::max(iterations / 4, 200);
    if (!fast_only) {
      ok = Measure(setup, Op::kHeartbeat, clients, per_client) && ok;
      ok = Measure(setup, Op::kLookupOne, clients, per_client) && ok;
      ok = Measure(setup, Op::kLookup, clients, per_client) && ok;
    }
    ok = Measure(setup, Op::kFastLookupOne, clients, per_client) && ok;
    ok = Measure(setup, Op::kFastLookup, clients, per_client) && ok;
  }
  daemon.Stop();
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) {
  // lookup_latency [CALLS [fast]]: "fast" runs the lookup fast path's two rows alone, also
  // at 64 and 128 clients.
  bool fast_only = argc > 2 && std::string(argv[2]) == "fast";
  return kvstrata::bench::Main(argc > 1 ? std::atoi(argv[1]) : 3000, fast_only);
}
