// libFuzzer target: an object tier's usage record and audit (daemon/tiers/object/
// object_usage.h) on any text. One that parses is exactly the text its value formats to (the
// one way a daemon writes it), so no two texts read as one record.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/tiers/object/object_usage.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  if (std::optional<kvstrata::UsageRecord> r = kvstrata::ParseUsageRecord(text)) {
    if (kvstrata::FormatUsageRecord(*r) != text) __builtin_trap();
  }
  if (std::optional<kvstrata::UsageAudit> a = kvstrata::ParseUsageAudit(text)) {
    const std::string again = kvstrata::FormatUsageAudit(*a);
    if (again != text || kvstrata::ParseUsageAudit(again) != a) __builtin_trap();
  }
  return 0;
}
