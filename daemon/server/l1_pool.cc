#include "daemon/server/l1_pool.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/common/byte_size.h"
#include "daemon/common/memory_limit.h"
#include "spdlog/spdlog.h"

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
                                      std::function<bool(SessionId)> may_write,
                                      const std::vector<uint64_t>& shares) {
  L1Pool pool;
  // The pool is populated (every page touched) at start: one larger than the memory this
  // process may use would get the daemon OOM-killed with no word of why.
  MemoryLimit limit = ReadMemoryLimit();
  if (limit.bytes != 0 && l1.capacity_bytes > limit.bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "l1.capacity = ", FormatByteSize(l1.capacity_bytes), " is more than this daemon may use (",
        FormatByteSize(limit.bytes), ", ", limit.source, "): lower l1.capacity"));
  }
  std::vector<uint64_t> sizes = {0};
  uint64_t shared = l1.capacity_bytes;
  for (uint64_t share : shares) {
    uint64_t bytes = share / l1.slab_bytes * l1.slab_bytes;
    if (bytes == 0 || bytes >= shared) {
      return absl::InvalidArgumentError(
          absl::StrCat("the tenants' l1_capacity shares (", FormatByteSize(share),
                       " and others) leave less than "
                       "one slab (l1.slab_size) of l1.capacity = ",
                       FormatByteSize(l1.capacity_bytes),
                       " to the tenants without a share: raise l1.capacity or lower the shares"));
    }
    shared -= bytes;
    sizes.push_back(bytes);
  }
  if (shared < l1.slab_bytes) {
    return absl::InvalidArgumentError("l1.capacity leaves less than one slab to partition 0");
  }
  sizes[0] = shared;
  ShmRegionOptions region_options;
  region_options.bytes = l1.capacity_bytes;
  if (sizes.size() > 1) region_options.partition_bytes = sizes;
  region_options.huge_pages = HugePagesFrom(l1.huge_pages);
  // Touching every page takes seconds per GiB: say so, then how far it got.
  spdlog::info("l1_populating size=\"{}\" huge_pages={}", HumanByteSize(l1.capacity_bytes),
               l1.huge_pages);
  region_options.on_progress = [](uint64_t done, uint64_t total) {
    spdlog::info("l1_populating done=\"{}\" of=\"{}\" percent={}", HumanByteSize(done),
                 HumanByteSize(total), total == 0 ? 100 : done * 100 / total);
  };
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

  std::vector<PartitionedCache::Partition> partitions;
  for (size_t p = 0; p < pool.region->partition_count(); ++p) {
    SlabAllocatorOptions slab_options;
    slab_options.region_bytes = pool.region->partition_size(p);
    slab_options.slab_bytes = l1.slab_bytes;
    slab_options.base_offset = pool.region->partition_offset(p);
    absl::StatusOr<std::unique_ptr<SlabAllocator>> allocator = SlabAllocator::Create(slab_options);
    if (!allocator.ok()) return allocator.status();
    pool.allocators.push_back(std::move(*allocator));
    absl::StatusOr<std::unique_ptr<BlockCache>> cache =
        CreateCache(l1, sessions, listener, may_write, pool.allocators.back().get(), p);
    if (!cache.ok()) return cache.status();
    pool.caches.push_back(std::move(*cache));
    partitions.push_back({pool.caches.back().get(), pool.region->partition_offset(p),
                          pool.region->partition_size(p)});
  }
  pool.cache = std::make_unique<PartitionedCache>(std::move(partitions));
  return pool;
}

absl::StatusOr<std::unique_ptr<BlockCache>> L1Pool::CreateCache(
    const L1Config& l1, const SessionsConfig& sessions, TierListener* listener,
    const std::function<bool(SessionId)>& may_write, SlabAllocator* allocator, size_t partition) {
  BlockCacheOptions cache_options;
  cache_options.eviction_policy = l1.eviction_policy;
  cache_options.high_watermark = l1.high_watermark;
  cache_options.low_watermark = l1.low_watermark;
  cache_options.admission_min_lookups = static_cast<uint32_t>(l1.admission_min_lookups);
  cache_options.max_lease_ttl = absl::Milliseconds(sessions.max_lease_ttl_ms);
  cache_options.listener = listener;
  cache_options.may_write = may_write;
  cache_options.first_id = PartitionedCache::PartitionFirstId(partition);
  return BlockCache::Create(allocator, cache_options);
}

}  // namespace kvstrata
