#include "daemon/server/lower_tiers.h"

#include <utility>

#include "daemon/common/byte_size.h"
#include "daemon/tiers/tier_factory.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

LowerTierOptions OptionsOf(const LowerTierConfig& c) {
  LowerTierOptions options;
  options.write_back = c.write_back;
  options.write_down_min_hits = static_cast<uint32_t>(c.write_down_min_hits);
  options.io_threads = static_cast<size_t>(c.io_threads);
  options.write_queue_blocks = static_cast<size_t>(c.write_queue_blocks);
  options.defer_when_full = c.backlog_policy == "defer";
  options.probe_timeout = absl::Milliseconds(c.probe_timeout_ms);
  options.presence_check_sync = c.presence_check == "sync";
  return options;
}

// A tier's error that is the configuration's (a kind's key, credentials that were refused,
// a bucket that is not there or not ours): the daemon does not start. Any other (a
// directory or a server that cannot be used now) leaves the tier out.
bool StopsStart(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument ||
         s.code() == absl::StatusCode::kUnauthenticated ||
         s.code() == absl::StatusCode::kPermissionDenied ||
         (s.code() == absl::StatusCode::kNotFound &&
          s.message().find("NoSuchBucket") != absl::string_view::npos);
}

// Opens the tier of `c` (enabled) and hands it to the manager; a tier that cannot open is
// logged and left out, unless its configuration is wrong (StopsStart: the error returned).
absl::Status AddTier(const LowerTierConfig& c, const TierDescriptor& d,
                     NamespaceRegistry* namespaces, TierManager& manager) {
  TierContext context;
  context.namespace_ids = namespaces;  // one id space with L1 and the wire
  context.observer = [m = &manager, tier = d.id](NamespaceId ns, absl::string_view key, bool stored,
                                                 RemovalCause cause) {
    m->OnLowerTierChange(tier, ns, key, stored, cause);
  };
  absl::StatusOr<std::unique_ptr<BlockTier>> opened = MakeTier(c, d, context);
  if (!opened.ok()) {
    if (StopsStart(opened.status())) return opened.status();
    spdlog::error("tier_unavailable tier={} kind={} key={}.path path=\"{}\" reason=\"{}\"", c.name,
                  c.kind, c.name, c.path, opened.status().ToString());
    return absl::OkStatus();
  }
  spdlog::info("tier_ready tier={} kind={} path=\"{}\" capacity=\"{}\" write_policy={}", c.name,
               c.kind, c.path, HumanByteSize(c.capacity_bytes),
               c.write_back ? "write-back" : "write-through");
  manager.AddTier(*std::move(opened), OptionsOf(c));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TierManager>> MakeTierManager(const Config& config,
                                                             NamespaceRegistry* namespaces) {
  absl::StatusOr<TierTable> table = BuildTierTable(config.tiers);
  if (!table.ok()) return table.status();
  auto manager = std::make_unique<TierManager>(
      namespaces, absl::Milliseconds(config.l1.promotion_wait_ms), *table);
  for (size_t i = 0; i < config.tiers.size(); ++i) {
    const TierDescriptor& d = table->Of(TierAt(static_cast<int>(i) + 1));
    if (!d.enabled) continue;
    if (absl::Status s = AddTier(config.tiers[i], d, namespaces, *manager); !s.ok()) return s;
  }
  return manager;
}

}  // namespace kvstrata
