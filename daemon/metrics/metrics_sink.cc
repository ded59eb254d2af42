#include "daemon/metrics/metrics_sink.h"

namespace kvstrata {

std::string_view DropReasonName(DropReason reason) {
  static constexpr std::string_view kNames[] = {"no_space", "not_admitted", "queue_full",
                                                "io_error"};
  return kNames[static_cast<int>(reason)];
}

}  // namespace kvstrata
