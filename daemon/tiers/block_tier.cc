#include "daemon/tiers/block_tier.h"

namespace kvstrata {

absl::string_view TierStateName(TierState state) {
  switch (state) {
    case TierState::kOk:
      return "ok";
    case TierState::kDegraded:
      return "degraded";
    case TierState::kReadOnly:
      return "read-only";
  }
  return "unknown";
}

}  // namespace kvstrata
