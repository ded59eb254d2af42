// The daemon's one vocabulary for where a block lives and how it moves: the Tier enum and
// the one table that maps it to every name it has outside the core (the metric label, the
// KV-event medium and locality, the wire number of common.proto's Tier, which is also the
// fast path's byte, and the CLI's name), plus how a block leaves a tier and which
// way a copy goes. Header-only, constexpr; no other module defines a tier encoding.
#ifndef KVSTRATA_DAEMON_COMMON_TIER_H_
#define KVSTRATA_DAEMON_COMMON_TIER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvstrata {

// L1 = the pinned shared-memory pool, L2 = a local directory (NVMe), L3 = a directory on a
// shared filesystem. The values are bits of BlockEntry::tiers.
enum class Tier : uint8_t { kL1 = 1, kL2 = 2, kL3 = 4 };
inline constexpr int kTierCount = 3;

// Every name of one tier.
struct TierNames {
  Tier tier;
  std::string_view label;     // metrics' `tier` label, the CLI's --tier, config sections
  uint8_t wire;               // common.proto Tier (TIER_L1_DRAM = 1, ...); the fast-path byte
  std::string_view medium;    // KV events' `medium`, as vLLM names its own (kv_events.py)
  std::string_view locality;  // KV events' locality: L3 is shared by other nodes
};

inline constexpr std::array<TierNames, kTierCount> kTierTable = {{
    {Tier::kL1, "l1", 1, "CPU", "LOCAL"},
    {Tier::kL2, "l2", 2, "STORAGE", "LOCAL"},
    {Tier::kL3, "l3", 3, "STORAGE", "REMOTE"},
}};

inline constexpr uint8_t TierBit(Tier t) { return static_cast<uint8_t>(t); }

// 0, 1, 2 for L1, L2, L3: the row of kTierTable, an index into per-tier arrays.
inline constexpr int TierIndex(Tier t) { return t == Tier::kL1 ? 0 : t == Tier::kL2 ? 1 : 2; }
inline constexpr const TierNames& NamesOf(Tier t) { return kTierTable[TierIndex(t)]; }
inline constexpr std::string_view TierLabel(Tier t) { return NamesOf(t).label; }
inline constexpr uint8_t TierWire(Tier t) { return NamesOf(t).wire; }

// The tier of a wire number or a label; nullopt for anything else (0 = unspecified too).
inline constexpr std::optional<Tier> TierFromWire(uint32_t wire) {
  for (const TierNames& n : kTierTable) {
    if (n.wire == wire) return n.tier;
  }
  return std::nullopt;
}
inline constexpr std::optional<Tier> TierFromLabel(std::string_view label) {
  for (const TierNames& n : kTierTable) {
    if (n.label == label) return n.tier;
  }
  return std::nullopt;
}

// The fastest tier present in `tiers` (a non-zero mask of TierBit).
inline constexpr Tier FastestTier(uint8_t tiers) {
  return static_cast<Tier>(tiers & static_cast<uint8_t>(-tiers));
}

// How a visible block left a tier (listeners, metrics' `cause` label, KV events).
enum class RemovalCause : uint8_t { kEvicted, kAdminEvict, kCleared };
inline constexpr int kRemovalCauseCount = 3;
inline constexpr std::string_view RemovalCauseName(RemovalCause cause) {
  return cause == RemovalCause::kEvicted      ? "evicted"
         : cause == RemovalCause::kAdminEvict ? "admin_evict"
                                              : "cleared";
}

// Which way a copy moves KV bytes: down = away from the GPU (a store GPU -> L1, a write
// L1 -> L2/L3), up = toward it (a load L1 -> GPU, a promotion L2/L3 -> L1).
enum class CopyDirection : uint8_t { kDown, kUp };

// A copy between one tier and the level above it (the GPU above L1, L1 above L2 and L3)
// as metrics name it: "gpu_to_l1", "l1_to_gpu", "l1_to_l2", "l2_to_l1", "l1_to_l3",
// "l3_to_l1". Index = 2 * TierIndex(lower) + direction.
inline constexpr int kCopyRouteCount = 2 * kTierCount;
inline constexpr int CopyRouteIndex(Tier lower, CopyDirection d) {
  return 2 * TierIndex(lower) + (d == CopyDirection::kUp ? 1 : 0);
}
inline constexpr std::array<std::string_view, kCopyRouteCount> kCopyRouteNames = {
    "gpu_to_l1", "l1_to_gpu", "l1_to_l2", "l2_to_l1", "l1_to_l3", "l3_to_l1"};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_TIER_H_
