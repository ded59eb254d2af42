// TierTable: the daemon's tiers as data. One descriptor per tier -- id, label, kind,
// medium, locality, shared -- L1 first (id 0), then the configuration's [[tiers]] list in
// its order (fastest first). Built once at start-up (server/lower_tiers.cc, from the
// configuration and the kinds of tiers/tier_factory.h) and owned by the tier stack; the
// modules that name tiers to the outside read it: metrics' `tier` labels and copy routes,
// KV events' medium and locality, the admin wire's tier list and the CLI's --tier labels.
// No code decides behaviour by a tier's id or label; a tier's behaviour is its kind's.
// Header-only value type; immutable once built, so reading it is thread-safe.
#ifndef KVSTRATA_DAEMON_COMMON_TIER_TABLE_H_
#define KVSTRATA_DAEMON_COMMON_TIER_TABLE_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/common/tier.h"

namespace kvstrata {

struct TierDescriptor {
  Tier id = Tier::kL1;
  std::string label;     // "l1", "l2", "nvme": metrics' `tier` label, the CLI's --tier, logs
  std::string kind;      // "memory" (L1), "local-file", "shared-file" (tiers/tier_factory.h)
  std::string medium;    // KV events' medium, as vLLM names its own: "CPU", "STORAGE"
  std::string locality;  // KV events' locality: "LOCAL", or "REMOTE" (shared with other nodes)
  bool shared = false;   // other nodes' daemons write and delete its blocks too
  bool enabled = true;   // configured but off: listed (kvstrata tiers), never opened

  bool operator==(const TierDescriptor&) const = default;
};

class TierTable {
 public:
  // L1 alone.
  TierTable() { tiers_.push_back({Tier::kL1, "l1", "memory", "CPU", "LOCAL", false, true}); }

  // The table the embedded default configuration builds, with l3 on: l1; l2 (local-file,
  // STORAGE, LOCAL); l3 (shared-file, STORAGE, REMOTE). For tests and for modules used
  // before they are given the daemon's; tests/unit/tiers/tier_factory_test.cc checks that
  // the default configuration builds this.
  static TierTable Standard() {
    TierTable table;
    table.Add({Tier::kL2, "l2", "local-file", "STORAGE", "LOCAL", false, true});
    table.Add({Tier::kL3, "l3", "shared-file", "STORAGE", "REMOTE", true, true});
    return table;
  }

  // Appends a lower tier; `d.id` is set to the next id and returned. REQUIRES: size() <
  // kMaxTiers and a label no tier has (the configuration's checks guarantee both).
  Tier Add(TierDescriptor d) {
    d.id = TierAt(static_cast<int>(tiers_.size()));
    tiers_.push_back(std::move(d));
    return tiers_.back().id;
  }

  size_t size() const { return tiers_.size(); }
  // By id: L1 first.
  const std::vector<TierDescriptor>& all() const { return tiers_; }
  bool Has(Tier t) const { return static_cast<size_t>(TierIndex(t)) < tiers_.size(); }
  // REQUIRES: Has(t).
  const TierDescriptor& Of(Tier t) const { return tiers_[static_cast<size_t>(TierIndex(t))]; }
  // The tier with this label; nullptr when none has it.
  const TierDescriptor* Find(std::string_view label) const {
    for (const TierDescriptor& d : tiers_) {
      if (d.label == label) return &d;
    }
    return nullptr;
  }
  // The label, or "tier<N>" for an id the table does not have.
  std::string Label(Tier t) const {
    return Has(t) ? Of(t).label : "tier" + std::to_string(TierIndex(t));
  }
  // A copy's route as metrics name it: "gpu_to_l1" / "l1_to_gpu" for L1, "l1_to_<label>" /
  // "<label>_to_l1" for a lower tier.
  std::string RouteName(Tier lower, CopyDirection d) const {
    const std::string above = lower == Tier::kL1 ? "gpu" : "l1";
    const std::string self = Label(lower);
    return d == CopyDirection::kDown ? above + "_to_" + self : self + "_to_" + above;
  }

 private:
  std::vector<TierDescriptor> tiers_;  // by id
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_TIER_TABLE_H_
