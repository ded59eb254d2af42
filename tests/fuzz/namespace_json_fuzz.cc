// libFuzzer target: namespace.json (daemon/tiers/namespace_file.h) on any text. A spec that
// parses must write back to JSON that parses to the same fingerprint.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "daemon/namespaces/namespace_spec.h"
#include "daemon/tiers/namespace_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kvstrata::NamespaceSpec> spec = kvstrata::NamespaceFromJson(json);
  if (!spec.ok()) return 0;
  absl::StatusOr<kvstrata::NamespaceSpec> again =
      kvstrata::NamespaceFromJson(kvstrata::NamespaceToJson(*spec));
  if (!again.ok() || kvstrata::Fingerprint(*again) != kvstrata::Fingerprint(*spec)) {
    __builtin_trap();
  }
  return 0;
}
