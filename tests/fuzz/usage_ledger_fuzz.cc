// libFuzzer target: the L3 usage ledger (daemon/tiers/shared_usage.h) on any text. A ledger
// that parses must format back to the same text and parse to the same ledger.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/tiers/shared_usage.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<kvstrata::UsageLedger> ledger = kvstrata::ParseUsageLedger(text);
  if (!ledger.has_value()) return 0;
  const std::string again = kvstrata::FormatUsageLedger(*ledger);
  if (again != text || kvstrata::ParseUsageLedger(again) != ledger) __builtin_trap();
  return 0;
}
