// libFuzzer target: the configuration (daemon/config/config_loader.h) from any TOML file
// text, and from any --set overrides (the input's lines). Only the result's existence is
// checked: no input may crash the loader.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "daemon/config/config_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  static const std::string path = "/tmp/kvs-config-fuzz-" + std::to_string(getpid()) + ".toml";
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    (void)kvstrata::LoadConfig(path, {});
  }
  std::vector<std::string> overrides = absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (overrides.size() <= 16) (void)kvstrata::LoadConfig("", overrides);
  return 0;
}
