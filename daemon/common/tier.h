// The daemon's one vocabulary for where a block lives and how it moves: a tier's id (Tier)
// and what the id is on the wire and in a block's tier mask, plus how a block leaves a tier
// and which way a copy goes. Header-only, constexpr. What a tier is (its label, kind,
// medium, locality) is not here but in the daemon's tier table (tier_table.h), built at
// start-up from the configuration: no code decides behaviour by a tier's number, only L1
// (always 0) is named.
#ifndef KVSTRATA_DAEMON_COMMON_TIER_H_
#define KVSTRATA_DAEMON_COMMON_TIER_H_

#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvstrata {

// A tier's id in the daemon's tier table: L1 (the pinned shared-memory pool) is 0, the
// tiers below it 1 .. kMaxTiers - 1 in the order of the configuration's [[tiers]] list
// (fastest first). An id is a bit of BlockEntry::tiers (TierBit) and, plus one, the wire
// number (common.proto's Tier, the fast path's byte). kL2 and kL3 are the ids the embedded
// default configuration gives its "l2" (local-file) and "l3" (shared-file) entries, so
// common.proto's TIER_L2_LOCAL / TIER_L3_SHARED keep naming them; the daemon's code never
// compares with them (tests do).
enum class Tier : uint8_t { kL1 = 0, kL2 = 1, kL3 = 2 };
inline constexpr int kMaxTiers = 8;  // L1 and up to 7 lower tiers (a uint8_t mask)

inline constexpr int TierIndex(Tier t) { return static_cast<int>(t); }
inline constexpr uint8_t TierBit(Tier t) { return static_cast<uint8_t>(1u << TierIndex(t)); }
inline constexpr Tier TierAt(int index) { return static_cast<Tier>(index); }
// common.proto Tier (TIER_L1_DRAM = 1, ...); also the fast path's byte.
inline constexpr uint8_t TierWire(Tier t) { return static_cast<uint8_t>(TierIndex(t) + 1); }
// The id of a wire number; nullopt for 0 (unspecified) and numbers past kMaxTiers. Whether
// the daemon has such a tier is its tier table's to say.
inline constexpr std::optional<Tier> TierFromWire(uint32_t wire) {
  if (wire == 0 || wire > kMaxTiers) return std::nullopt;
  return TierAt(static_cast<int>(wire) - 1);
}

// The fastest tier present in `tiers` (a non-zero mask of TierBit): the lowest id.
inline constexpr Tier FastestTier(uint8_t tiers) { return TierAt(std::countr_zero(tiers)); }

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

// A copy between one tier and the level above it (the GPU above L1, L1 above every lower
// tier), as an index into per-route arrays: 2 * TierIndex(lower) + direction. Its name
// ("gpu_to_l1", "l1_to_gpu", "l1_to_<label>", "<label>_to_l1") is the tier table's
// (TierTable::RouteName).
inline constexpr int kCopyRouteCount = 2 * kMaxTiers;
inline constexpr int CopyRouteIndex(Tier lower, CopyDirection d) {
  return 2 * TierIndex(lower) + (d == CopyDirection::kUp ? 1 : 0);
}

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_COMMON_TIER_H_
