#include "client/cli/output.h"

#include <google/protobuf/descriptor.h>

#include <iostream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/commands.h"
#include "client/cli/json_writer.h"

namespace kvstrata {

int PrintJson(const google::protobuf::Message& message) {
  std::cout << MessageToJson(message) << "\n";
  return kExitOk;
}

int PrintError(const absl::Status& status) {
  std::cerr << "kvstrata: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kUnavailable ? kExitUnavailable : kExitError;
}

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) value /= 1024, ++unit;
  return unit == 0 ? absl::StrCat(bytes, "B") : absl::StrFormat("%.1f%s", value, units[unit]);
}

std::string HumanDuration(uint64_t millis) {
  uint64_t s = millis / 1000;
  if (s < 60) return absl::StrFormat("%.1fs", millis / 1000.0);
  if (s < 3600) return absl::StrCat(s / 60, "m", s % 60, "s");
  if (s < 86400) return absl::StrCat(s / 3600, "h", s / 60 % 60, "m");
  return absl::StrCat(s / 86400, "d", s / 3600 % 24, "h");
}

std::string EnumName(const google::protobuf::Message& holder, const char* field) {
  const auto* descriptor = holder.GetDescriptor()->FindFieldByName(field);
  const auto* value = holder.GetReflection()->GetEnum(holder, descriptor);
  std::string name = value->name();
  std::string prefix = value->type()->name();  // e.g. "EngineKind" -> "ENGINE_KIND_"
  std::string upper;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (i > 0 && absl::ascii_isupper(prefix[i]) && absl::ascii_islower(prefix[i - 1])) upper += '_';
    upper += absl::ascii_toupper(prefix[i]);
  }
  if (name.rfind(upper + "_", 0) == 0) name = name.substr(upper.size() + 1);
  return absl::AsciiStrToLower(name);
}

std::string TierName(v1::Tier tier, const std::map<int, std::string>& labels) {
  if (tier == v1::TIER_UNSPECIFIED) return "-";
  auto it = labels.find(static_cast<int>(tier));
  return it != labels.end() ? it->second : absl::StrCat("tier", static_cast<int>(tier) - 1);
}

}  // namespace kvstrata
