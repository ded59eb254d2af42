#include "daemon/common/byte_size.h"

#include <array>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvstrata {
namespace {

constexpr std::array<std::pair<absl::string_view, uint64_t>, 10> kUnits = {{
    {"B", 1},
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"TiB", 1ULL << 40},
    {"KB", 1000ULL},
    {"MB", 1000ULL * 1000},
    {"GB", 1000ULL * 1000 * 1000},
    {"TB", 1000ULL * 1000 * 1000 * 1000},
    {"", 1},
}};

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < trimmed.size() && absl::ascii_isdigit(trimmed[digits])) ++digits;
  absl::string_view unit = absl::StripAsciiWhitespace(trimmed.substr(digits));
  uint64_t count = 0;
  if (digits == 0 || !absl::SimpleAtoi(trimmed.substr(0, digits), &count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a byte size (examples: 4GiB, 512MiB, 65536)"));
  }
  for (const auto& [name, factor] : kUnits) {
    if (unit != name) continue;
    if (count > std::numeric_limits<uint64_t>::max() / factor) {
      return absl::InvalidArgumentError(absl::StrCat("byte size '", text, "' is too large"));
    }
    return count * factor;
  }
  std::string units;
  for (const auto& [name, factor] : kUnits) {
    if (!name.empty()) absl::StrAppend(&units, units.empty() ? "" : ", ", name);
  }
  return absl::InvalidArgumentError(absl::StrCat("byte size '", text, "' has unknown unit '", unit,
                                                 "' (expected one of ", units,
                                                 ", or no unit for bytes)"));
}

std::string FormatByteSize(uint64_t bytes) {
  constexpr std::array<std::pair<absl::string_view, uint64_t>, 4> kBinary = {
      {{"TiB", 1ULL << 40}, {"GiB", 1ULL << 30}, {"MiB", 1ULL << 20}, {"KiB", 1ULL << 10}}};
  for (const auto& [name, factor] : kBinary) {
    if (bytes >= factor && bytes % factor == 0) return absl::StrCat(bytes / factor, name);
  }
  return absl::StrCat(bytes, "B");
}

std::string HumanByteSize(uint64_t bytes) {
  constexpr std::array<absl::string_view, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < kNames.size()) value /= 1024, ++unit;
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", value, kNames[unit]);
}

}  // namespace kvstrata
