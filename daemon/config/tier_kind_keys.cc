#include "daemon/config/tier_kind_keys.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/byte_size.h"

namespace kvstrata {

template <typename T>
const T* TierKindKeyReader::Get(const char* key, const char* expected) {
  const TierKindKeys::Value* value = keys_.Find(key);
  const T* typed = value == nullptr ? nullptr : std::get_if<T>(value);
  if (typed == nullptr) Fail(key, absl::StrCat("missing: expected ", expected));
  return typed;
}

std::string TierKindKeyReader::String(const char* key) {
  const std::string* value = Get<std::string>(key, "a string");
  return value == nullptr ? "" : *value;
}

bool TierKindKeyReader::Bool(const char* key) {
  const bool* value = Get<bool>(key, "a boolean");
  return value != nullptr && *value;
}

int64_t TierKindKeyReader::Int(const char* key, int64_t min, int64_t max) {
  const int64_t* value = Get<int64_t>(key, "an integer");
  if (value == nullptr) return min;
  if (*value < min || *value > max) {
    Fail(key,
         absl::StrCat(*value, " is out of range: expected an integer from ", min, " to ", max));
    return min;
  }
  return *value;
}

uint64_t TierKindKeyReader::Bytes(const char* key, uint64_t min) {
  const std::string* text = Get<std::string>(key, "a byte size, e.g. \"64GiB\"");
  if (text == nullptr) return min;
  absl::StatusOr<uint64_t> bytes = ParseByteSize(*text);
  if (!bytes.ok()) return Fail(key, bytes.status().message()), min;
  if (*bytes < min) {
    Fail(key, absl::StrCat("'", *text, "' is too small: expected at least ", FormatByteSize(min)));
    return min;
  }
  return *bytes;
}

std::string TierKindKeyReader::OneOf(const char* key, const std::set<std::string>& allowed) {
  std::string value = String(key);
  if (keys_.Find(key) != nullptr && !allowed.contains(value)) {
    Fail(key, absl::StrCat("'", value, "' is not one of: ", absl::StrJoin(allowed, ", ")));
  }
  return value;
}

std::string TierKindKeyReader::Path(const char* key) {
  std::string value = String(key);
  if (!value.empty() && value.front() != '/') {
    Fail(key, absl::StrCat("'", value, "' is relative: expected an absolute path"));
  }
  return value;
}

void TierKindKeyReader::Fail(const char* key, absl::string_view why) {
  errors_.push_back(absl::StrCat("config key '", label_, ".", key, "': ", why));
}

absl::Status TierKindKeyReader::status() const {
  if (errors_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n  "));
}

}  // namespace kvstrata
