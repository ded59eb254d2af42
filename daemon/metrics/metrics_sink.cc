#include "daemon/metrics/metrics_sink.h"

namespace kvstrata {

std::string_view MetricTierName(MetricTier tier) {
  static constexpr std::string_view kNames[] = {"l1", "l2", "l3"};
  return kNames[static_cast<int>(tier)];
}

std::string_view MetricDirectionName(MetricDirection direction) {
  static constexpr std::string_view kNames[] = {"gpu_to_l1", "l1_to_gpu", "l1_to_l2",
                                                "l2_to_l1",  "l1_to_l3",  "l3_to_l1"};
  return kNames[static_cast<int>(direction)];
}

std::string_view DropReasonName(DropReason reason) {
  static constexpr std::string_view kNames[] = {"no_space", "not_admitted", "queue_full",
                                                "io_error"};
  return kNames[static_cast<int>(reason)];
}

std::string_view RemovalKindName(RemovalKind kind) {
  static constexpr std::string_view kNames[] = {"evicted", "admin_evict", "cleared"};
  return kNames[static_cast<int>(kind)];
}

}  // namespace kvstrata
