// A minimal JSON reader/writer for flat objects whose values are strings or unsigned
// integers (all namespace.json needs). Not a general JSON library. Thread-compatible.
#ifndef KVSTRATA_DAEMON_TIERS_FLAT_JSON_H_
#define KVSTRATA_DAEMON_TIERS_FLAT_JSON_H_

#include <cstdint>
#include <string>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvstrata {

using FlatJsonValue = std::variant<std::string, uint64_t>;
using FlatJsonObject = absl::flat_hash_map<std::string, FlatJsonValue>;

// Appends `"key": value` members; Finish() closes the object.
class FlatJsonWriter {
 public:
  void Add(absl::string_view key, absl::string_view value);
  void Add(absl::string_view key, uint64_t value);
  std::string Finish();

 private:
  void AddKey(absl::string_view key);
  std::string out_ = "{";
  bool first_ = true;
};

// INVALID_ARGUMENT for anything but one flat object of strings and unsigned integers,
// and for duplicate keys.
absl::StatusOr<FlatJsonObject> ParseFlatJson(absl::string_view text);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_FLAT_JSON_H_
