#include "daemon/common/memory_limit.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvstrata {
namespace {

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<uint64_t> ParseMemTotal(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemTotal:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) return std::nullopt;
    uint64_t kib = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<std::string> ParseCgroupV2Path(absl::string_view self_cgroup) {
  for (absl::string_view line : absl::StrSplit(self_cgroup, '\n')) {
    if (absl::ConsumePrefix(&line, "0::")) return std::string(line);
  }
  return std::nullopt;
}

std::optional<uint64_t> ParseMemoryMax(absl::string_view text) {
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &bytes)) return std::nullopt;
  return bytes;
}

MemoryLimit ReadMemoryLimit(const std::string& proc_root, const std::string& cgroup_root) {
  MemoryLimit limit;
  if (std::optional<std::string> meminfo = ReadText(proc_root + "/meminfo")) {
    if (std::optional<uint64_t> total = ParseMemTotal(*meminfo)) {
      limit = {*total, "MemTotal in " + proc_root + "/meminfo"};
    }
  }
  std::optional<std::string> self = ReadText(proc_root + "/self/cgroup");
  std::optional<std::string> path = self ? ParseCgroupV2Path(*self) : std::nullopt;
  if (!path.has_value()) return limit;
  // Every ancestor's memory.max limits this process too.
  std::string dir = *path;
  while (true) {
    std::string file = cgroup_root + (dir == "/" ? "" : dir) + "/memory.max";
    if (std::optional<std::string> text = ReadText(file)) {
      std::optional<uint64_t> max = ParseMemoryMax(*text);
      if (max.has_value() && (limit.bytes == 0 || *max < limit.bytes)) limit = {*max, file};
    }
    if (dir.empty() || dir == "/") break;
    size_t slash = dir.rfind('/');
    dir = slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
  }
  return limit;
}

}  // namespace kvstrata
