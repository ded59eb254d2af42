// TierKindKeys: the keys of one [[tiers]] entry that only its kind knows (an object
// store's endpoint and bucket, ...), carried through the configuration untouched and read
// by the kind itself (its maker in daemon/tiers/<kind>/), so that a kind with keys of its
// own needs no field, reader or check outside its folder. The loader knows each key and its
// type from the kind's [tier_kinds.<kind>] table of the embedded default (an unknown key or
// a mistyped value is refused there, as for every key); what a value must be beyond its
// type (a range, one of some names, an absolute path) is the kind's to check, through
// TierKindKeyReader, whose messages name `<label>.<key>` as the loader's do.
//
// Value types; thread-compatible.
#ifndef KVSTRATA_DAEMON_CONFIG_TIER_KIND_KEYS_H_
#define KVSTRATA_DAEMON_CONFIG_TIER_KIND_KEYS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvstrata {

class TierKindKeys {
 public:
  // A TOML string (byte sizes too: "64MiB"), integer, float or boolean.
  using Value = std::variant<std::string, int64_t, double, bool>;

  void Set(std::string key, Value value) { values_[std::move(key)] = std::move(value); }
  const Value* Find(absl::string_view key) const {
    auto it = values_.find(std::string(key));
    return it == values_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Value>& all() const { return values_; }
  bool operator==(const TierKindKeys&) const = default;

 private:
  std::map<std::string, Value> values_;
};

// Reads a kind's keys of the tier labelled `label`, each failure one line: "config key
// '<label>.<key>': <why>" (a missing key or another type: "missing: expected ...").
// status() is OK, or INVALID_ARGUMENT with every line.
class TierKindKeyReader {
 public:
  TierKindKeyReader(const TierKindKeys& keys, std::string label)
      : keys_(keys), label_(std::move(label)) {}

  std::string String(const char* key);
  bool Bool(const char* key);
  int64_t Int(const char* key, int64_t min, int64_t max);
  uint64_t Bytes(const char* key, uint64_t min);
  std::string OneOf(const char* key, const std::set<std::string>& allowed);
  // "" or an absolute path.
  std::string Path(const char* key);

  void Fail(const char* key, absl::string_view why);
  absl::Status status() const;

 private:
  template <typename T>
  const T* Get(const char* key, const char* expected);

  const TierKindKeys& keys_;
  const std::string label_;
  std::vector<std::string> errors_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CONFIG_TIER_KIND_KEYS_H_
