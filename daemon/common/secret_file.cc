#include "daemon/common/secret_file.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvstrata {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, std::string_view key) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) text.clear();
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key '", std::string(key), "': '", path, "' is missing or empty"));
  }
  return text;
}

}  // namespace kvstrata
