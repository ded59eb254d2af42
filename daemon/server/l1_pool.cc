#include "daemon/server/l1_pool.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/common/byte_size.h"
#include "daemon/common/memory_limit.h"

namespace kvstrata {
namespace {

HugePages HugePagesFrom(const std::string& setting) {
  if (setting == "on") return HugePages::kOn;
  if (setting == "off") return HugePages::kOff;
  return HugePages::kAuto;
}

}  // namespace

absl::StatusOr<L1Pool> L1Pool::Create(const L1Config& l1, const SessionsConfig& sessions,
                                      TierListener* listener,
                                      std::function<bool(SessionId)> may_write) {
  L1Pool pool;
  // The pool is populated (every page touched) at start: one larger than the memory this
  // process may use would get the daemon OOM-killed with no word of why.
  MemoryLimit limit = ReadMemoryLimit();
  if (limit.bytes != 0 && l1.capacity_bytes > limit.bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "l1.capacity = ", FormatByteSize(l1.capacity_bytes), " is more than this daemon may use (",
        FormatByteSize(limit.bytes), ", ", limit.source, "): lower l1.capacity"));
  }
  ShmRegionOptions region_options;
  region_options.bytes = l1.capacity_bytes;
  region_options.huge_pages = HugePagesFrom(l1.huge_pages);
  absl::StatusOr<std::unique_ptr<ShmRegion>> region = ShmRegion::Create(region_options);
  if (!region.ok()) {
    std::string hint = l1.huge_pages == "on"
                           ? " (l1.huge_pages = \"on\" needs that many free 2 MiB huge pages: "
                             "raise vm.nr_hugepages, or use \"auto\" to fall back to normal pages)"
                           : "";
    return absl::Status(
        region.status().code(),
        absl::StrCat("l1.capacity = ", FormatByteSize(l1.capacity_bytes),
                     ", l1.huge_pages = ", l1.huge_pages, ": ", region.status().message(), hint));
  }
  pool.region = std::move(*region);

  SlabAllocatorOptions slab_options;
  slab_options.region_bytes = pool.region->size();
  slab_options.slab_bytes = l1.slab_bytes;
  absl::StatusOr<std::unique_ptr<SlabAllocator>> allocator = SlabAllocator::Create(slab_options);
  if (!allocator.ok()) return allocator.status();
  pool.allocator = std::move(*allocator);

  BlockCacheOptions cache_options;
  cache_options.eviction_policy = l1.eviction_policy;
  cache_options.high_watermark = l1.high_watermark;
  cache_options.low_watermark = l1.low_watermark;
  cache_options.admission_min_lookups = static_cast<uint32_t>(l1.admission_threshold);
  cache_options.max_lease_ttl = absl::Milliseconds(sessions.max_lease_ttl_ms);
  cache_options.listener = listener;
  cache_options.may_write = std::move(may_write);
  absl::StatusOr<std::unique_ptr<BlockCache>> cache =
      BlockCache::Create(pool.allocator.get(), cache_options);
  if (!cache.ok()) return cache.status();
  pool.cache = std::move(*cache);
  return pool;
}

}  // namespace kvstrata
