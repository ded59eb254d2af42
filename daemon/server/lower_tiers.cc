#include "daemon/server/lower_tiers.h"

#include <utility>

#include "daemon/common/byte_size.h"
#include "daemon/tiers/file_tier.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

FsyncPolicy FsyncOf(const std::string& name) {
  if (name == "file") return FsyncPolicy::kFile;
  if (name == "file-and-dir") return FsyncPolicy::kFileAndDir;
  return FsyncPolicy::kNone;
}

void AddTier(const FileTierConfig& c, Tier tier, bool shared, NamespaceRegistry* namespaces,
             TierManager& manager) {
  if (!c.enabled) return;
  FileTierOptions files;
  files.name = c.name;
  files.tier = tier;
  files.root = c.path;
  files.capacity_bytes = c.capacity_bytes;
  files.eviction_policy = c.eviction_policy;
  files.high_watermark = c.high_watermark;
  files.low_watermark = c.low_watermark;
  files.shared = shared;
  files.fsync = FsyncOf(c.fsync);
  files.negative_cache_ttl = absl::Milliseconds(c.negative_cache_ms);
  files.access_record_interval = absl::Milliseconds(c.access_record_interval_ms);
  files.shared_eviction_interval = absl::Milliseconds(c.eviction_interval_ms);
  files.shared_audit_interval = absl::Seconds(c.audit_interval_s);
  files.follow_interval = absl::Milliseconds(c.follow_interval_ms);
  files.namespace_ids = namespaces;  // one id space with L1 and the wire
  files.observer = [m = &manager, tier](absl::string_view fingerprint, absl::string_view key,
                                        bool stored, RemovalCause cause) {
    m->OnLowerTierChange(tier, fingerprint, key, stored, cause);
  };
  absl::StatusOr<std::unique_ptr<FileTier>> opened = FileTier::Open(std::move(files));
  if (!opened.ok()) {
    spdlog::error("tier_unavailable tier={} key={}.path path=\"{}\" reason=\"{}\"", c.name, c.name,
                  c.path, opened.status().ToString());
    return;
  }
  LowerTierOptions options;
  options.write_back = c.write_back;
  options.write_down_min_hits = static_cast<uint32_t>(c.write_down_min_hits);
  options.io_threads = static_cast<size_t>(c.io_threads);
  options.write_queue_blocks = static_cast<size_t>(c.write_queue_blocks);
  options.defer_when_full = c.backlog_policy == "defer";
  options.probe_timeout = absl::Milliseconds(c.probe_timeout_ms);
  options.presence_check_sync = c.presence_check == "sync";
  spdlog::info("tier_ready tier={} path=\"{}\" capacity=\"{}\" write_policy={}", c.name, c.path,
               HumanByteSize(c.capacity_bytes), c.write_back ? "write-back" : "write-through");
  manager.AddTier(*std::move(opened), options);
}

}  // namespace

std::unique_ptr<TierManager> MakeTierManager(const Config& config, NamespaceRegistry* namespaces) {
  auto manager =
      std::make_unique<TierManager>(namespaces, absl::Milliseconds(config.l1.promotion_wait_ms));
  AddTier(config.l2, Tier::kL2, /*shared=*/false, namespaces, *manager);
  AddTier(config.l3, Tier::kL3, /*shared=*/true, namespaces, *manager);
  return manager;
}

}  // namespace kvstrata
