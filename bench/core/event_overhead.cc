// event_overhead: what the tier listeners (KV events and metrics) cost the cache. The same
// host-mode store/lookup/load of 16-block chains as cache_throughput (4 GiB pool of 256 KiB
// blocks, offsets only, eviction all along: ~32 block notices per chain) with
//   0: no listener (the baseline), 1: the KV event listener (publisher thread running,
//   no ZMQ socket), 2: metrics and events through the fan-out, as kvstratad runs them.
// Counters: notices dropped by the event queue (must stay 0) and batches published.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/core/store_chain.h"
#include "benchmark/benchmark.h"
#include "daemon/cache/block_cache.h"
#include "daemon/events/event_publisher.h"
#include "daemon/events/kv_event_listener.h"
#include "daemon/metrics/prometheus_metrics.h"
#include "daemon/server/metrics_tier_listener.h"
#include "daemon/server/tier_listener_fanout.h"

namespace kvstrata {
namespace {

using bench::kChain;
using bench::StoreThenLoad;

void BM_StoreThenLoadWithListeners(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  auto allocator = *SlabAllocator::Create({.region_bytes = 4ull << 30});
  std::unique_ptr<EventPublisher> publisher = *EventPublisher::Start({}, [](NamespaceId) {
    return NamespaceFacts{"bench-model", 16};
  });
  KvEventListener events(publisher.get());
  std::unique_ptr<PrometheusMetrics> metrics = *PrometheusMetrics::Create("");
  MetricsTierListener counted(metrics.get());
  TierListenerFanout fanout;
  fanout.Add(&counted);
  fanout.Add(&events);
  BlockCacheOptions options;
  options.listener = mode == 0   ? nullptr
                     : mode == 1 ? static_cast<TierListener*>(&events)
                                 : static_cast<TierListener*>(&fanout);
  auto cache = *BlockCache::Create(allocator.get(), options);
  uint64_t n = 0;
  for (auto _ : state) StoreThenLoad(*cache, n++);
  publisher->Stop();
  EventPublisherStats stats = publisher->Stats();
  state.SetItemsProcessed(state.iterations() * kChain);
  state.counters["dropped"] = static_cast<double>(stats.dropped_events);
  state.counters["batches"] = static_cast<double>(stats.published_batches);
  state.SetLabel(mode == 0 ? "no listener" : mode == 1 ? "events" : "metrics+events");
}
BENCHMARK(BM_StoreThenLoadWithListeners)->Arg(0)->Arg(1)->Arg(2);

}  // namespace
}  // namespace kvstrata

BENCHMARK_MAIN();
