#include "daemon/eviction/eviction_policy.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/eviction/arc_policy.h"
#include "daemon/eviction/lru_policy.h"
#include "daemon/eviction/s3fifo_policy.h"

namespace kvstrata {

absl::StatusOr<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                                   size_t capacity_entries) {
  if (name == "lru") return std::make_unique<LruPolicy>();
  if (name == "arc") return std::make_unique<ArcPolicy>(capacity_entries);
  if (name == "s3fifo") return std::make_unique<S3FifoPolicy>(capacity_entries);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown eviction policy '", std::string(name), "' (lru, arc, s3fifo)"));
}

}  // namespace kvstrata
