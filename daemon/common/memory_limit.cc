#include "daemon/common/memory_limit.h"

#include <fstream>
#include <sstream>
#include <vector>

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

// Keeps in `limit` the least of it and every `file_name` from `dir` (a cgroup path) up to
// `root` (the hierarchy's mount point), as read by `parse`.
void LeastUpTheTree(const std::string& root, std::string dir, const char* file_name,
                    std::optional<uint64_t> (*parse)(absl::string_view), MemoryLimit& limit) {
  while (true) {
    std::string file = root + (dir == "/" ? "" : dir) + "/" + file_name;
    if (std::optional<std::string> text = ReadText(file)) {
      std::optional<uint64_t> max = parse(*text);
      if (max.has_value() && (limit.bytes == 0 || *max < limit.bytes)) limit = {*max, file};
    }
    if (dir.empty() || dir == "/") break;
    size_t slash = dir.rfind('/');
    dir = slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
  }
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

std::optional<std::string> ParseCgroupV1MemoryPath(absl::string_view self_cgroup) {
  for (absl::string_view line : absl::StrSplit(self_cgroup, '\n')) {
    // hierarchy-id:controller,controller:path
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
      if (controller == "memory") return std::string(fields[2]);
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> ParseLimitInBytes(absl::string_view text) {
  std::optional<uint64_t> bytes = ParseMemoryMax(text);
  if (bytes.has_value() && *bytes >= (uint64_t{1} << 62)) return std::nullopt;
  return bytes;
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
  if (!self.has_value()) return limit;
  // Every ancestor's limit applies to this process too.
  if (std::optional<std::string> v2 = ParseCgroupV2Path(*self)) {
    LeastUpTheTree(cgroup_root, *v2, "memory.max", &ParseMemoryMax, limit);
  }
  // cgroup v1 (or hybrid): the memory controller's own hierarchy. In a container it is
  // mounted at the container's cgroup, so its path there is not found and the walk up ends
  // at the mount point, which is that cgroup.
  if (std::optional<std::string> v1 = ParseCgroupV1MemoryPath(*self)) {
    LeastUpTheTree(cgroup_root + "/memory", *v1, "memory.limit_in_bytes", &ParseLimitInBytes,
                   limit);
  }
  return limit;
}

}  // namespace kvstrata
