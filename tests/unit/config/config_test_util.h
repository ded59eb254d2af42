// Helpers of the config tests: a config file written for one test process, and an entry of
// `kvstrata config`'s list (Config::entries) by key.
#ifndef KVSTRATA_TESTS_UNIT_CONFIG_CONFIG_TEST_UTIL_H_
#define KVSTRATA_TESTS_UNIT_CONFIG_CONFIG_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "daemon/config/config.h"

namespace kvstrata {

// Writes `text` to a file of the test's temp dir named after `stem` and this process (CTest
// runs test cases in parallel processes) and returns its path.
inline std::string WriteTempConfig(const std::string& stem, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + stem + "." + std::to_string(getpid()) + ".toml";
  std::ofstream(path) << text;
  return path;
}

// The entry of `key` ("section.key"), or nullptr.
inline const ConfigEntry* FindEntry(const Config& config, const std::string& key) {
  for (const ConfigEntry& e : config.entries) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_CONFIG_CONFIG_TEST_UTIL_H_
