#include "daemon/common/runtime_paths.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

const char* NonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

}  // namespace

std::string DefaultSocketPath() {
  if (const char* socket = NonEmptyEnv("KVSTRATA_SOCKET")) return socket;
  if (const char* dir = NonEmptyEnv("RUNTIME_DIRECTORY"))
    return absl::StrCat(dir, "/kvstrata.sock");
  if (const char* dir = NonEmptyEnv("XDG_RUNTIME_DIR")) {
    return absl::StrCat(dir, "/kvstrata/kvstrata.sock");
  }
  return absl::StrCat("/tmp/kvstrata-", getuid(), "/kvstrata.sock");
}

std::string DefaultTierPath(absl::string_view label) {
  if (const char* cache = NonEmptyEnv("XDG_CACHE_HOME")) {
    return absl::StrCat(cache, "/kvstrata/", label);
  }
  if (const char* home = NonEmptyEnv("HOME")) return absl::StrCat(home, "/.cache/kvstrata/", label);
  return absl::StrCat("/var/tmp/kvstrata-", getuid(), "/", label);
}

std::string EndpointToTarget(const std::string& endpoint) {
  if (absl::StartsWith(endpoint, "/")) return absl::StrCat("unix://", endpoint);
  return endpoint;
}

}  // namespace kvstrata
