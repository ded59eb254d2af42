#include "daemon/tiers/tier_factory.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/tiers/file_tier.h"
#include "daemon/tiers/object/object_tier.h"

namespace kvstrata {
namespace {

using Maker = absl::StatusOr<std::unique_ptr<BlockTier>> (*)(const LowerTierConfig&,
                                                             const TierDescriptor&,
                                                             const TierContext&);

struct TierKind {
  std::string_view name;      // the [[tiers]] entry's `kind`
  std::string_view medium;    // KV events' medium (vLLM's names)
  std::string_view locality;  // KV events' locality: REMOTE = shared with other nodes
  bool shared;
  Maker make;
};

FsyncPolicy FsyncOf(const std::string& name) {
  if (name == "file") return FsyncPolicy::kFile;
  if (name == "file-and-dir") return FsyncPolicy::kFileAndDir;
  return FsyncPolicy::kNone;
}

// "local-file" and "shared-file": one FileTier each, its `shared` flag the kind's.
absl::StatusOr<std::unique_ptr<BlockTier>> MakeFileTier(const LowerTierConfig& c,
                                                        const TierDescriptor& d,
                                                        const TierContext& context) {
  FileTierOptions files;
  files.name = d.label;
  files.tier = d.id;
  files.root = c.path;
  files.capacity_bytes = c.capacity_bytes;
  files.eviction_policy = c.eviction_policy;
  files.high_watermark = c.high_watermark;
  files.low_watermark = c.low_watermark;
  files.shared = d.shared;
  files.fsync = FsyncOf(c.fsync);
  files.negative_cache_ttl = absl::Milliseconds(c.negative_cache_ms);
  files.access_record_interval = absl::Milliseconds(c.access_record_interval_ms);
  files.shared_eviction_interval = absl::Milliseconds(c.eviction_interval_ms);
  files.shared_audit_interval = absl::Seconds(c.audit_interval_s);
  files.follow_interval = absl::Milliseconds(c.follow_interval_ms);
  files.namespace_ids = context.namespace_ids;
  files.observer = context.observer;
  files.files = context.files;
  files.clock = context.clock;
  absl::StatusOr<std::unique_ptr<FileTier>> opened = FileTier::Open(std::move(files));
  if (!opened.ok()) return opened.status();
  return std::unique_ptr<BlockTier>(*std::move(opened));
}

// Every kind; a new one is one line here.
constexpr TierKind kKinds[] = {
    {"local-file", "STORAGE", "LOCAL", false, MakeFileTier},
    {"shared-file", "STORAGE", "REMOTE", true, MakeFileTier},
    {"object", "STORAGE", "REMOTE", true, MakeObjectTier},
};

const TierKind* FindKind(std::string_view name) {
  for (const TierKind& kind : kKinds) {
    if (kind.name == name) return &kind;
  }
  return nullptr;
}

absl::Status UnknownKind(const LowerTierConfig& entry) {
  std::string known;
  for (const TierKind& kind : kKinds) {
    absl::StrAppend(&known, known.empty() ? "" : ", ", std::string(kind.name));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tier '", entry.name, "': unknown kind '", entry.kind, "' (", known, ")"));
}

}  // namespace

std::vector<std::string_view> TierKindNames() {
  std::vector<std::string_view> names;
  for (const TierKind& kind : kKinds) names.push_back(kind.name);
  return names;
}

absl::StatusOr<TierDescriptor> DescribeTier(const LowerTierConfig& entry) {
  const TierKind* kind = FindKind(entry.kind);
  if (kind == nullptr) return UnknownKind(entry);
  TierDescriptor d;
  d.label = entry.name;
  d.kind = std::string(kind->name);
  d.medium = std::string(kind->medium);
  d.locality = std::string(kind->locality);
  d.shared = kind->shared;
  d.enabled = entry.enabled;
  return d;
}

absl::StatusOr<TierTable> BuildTierTable(const std::vector<LowerTierConfig>& entries) {
  TierTable table;
  for (const LowerTierConfig& entry : entries) {
    absl::StatusOr<TierDescriptor> d = DescribeTier(entry);
    if (!d.ok()) return d.status();
    if (table.size() >= kMaxTiers) {
      return absl::InvalidArgumentError(
          absl::StrCat("tier '", entry.name, "': more than ", kMaxTiers - 1, " tiers below L1"));
    }
    table.Add(*std::move(d));
  }
  return table;
}

absl::StatusOr<std::unique_ptr<BlockTier>> MakeTier(const LowerTierConfig& entry,
                                                    const TierDescriptor& descriptor,
                                                    const TierContext& context) {
  const TierKind* kind = FindKind(entry.kind);
  if (kind == nullptr) return UnknownKind(entry);
  return kind->make(entry, descriptor, context);
}

}  // namespace kvstrata
