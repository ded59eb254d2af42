// libFuzzer target: an object tier's credentials file (daemon/tiers/object/s3_credentials.h)
// on any text. Credentials that parse have a key id and a secret, each one trimmed line's
// value; an error names the file, a line number, the profile or a key -- never a value, so
// its message is one of the few fixed shapes, whatever the text holds.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "daemon/tiers/object/s3_credentials.h"

namespace {

bool Trimmed(const std::string& s) {
  return s == absl::StripAsciiWhitespace(s) && s.find('\n') == std::string::npos;
}

bool KnownError(absl::string_view m) {
  if (m == "F: no [p] profile" || m == "F: profile [p] has no aws_access_key_id" ||
      m == "F: profile [p] has no aws_secret_access_key") {
    return true;
  }
  if (!absl::ConsumePrefix(&m, "F:")) return false;
  const size_t colon = m.find(':');
  if (colon == absl::string_view::npos || colon == 0 || colon > 10) return false;
  for (char c : m.substr(0, colon)) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  m.remove_prefix(colon);
  return m == ": expected a [profile] line" || m == ": expected `key = value`";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kvstrata::S3Credentials> c = kvstrata::ParseCredentialsFile(text, "F", "p");
  if (!c.ok()) {
    if (!KnownError(c.status().message())) __builtin_trap();
    return 0;
  }
  if (c->access_key_id.empty() || c->secret_access_key.empty() || !Trimmed(c->access_key_id) ||
      !Trimmed(c->secret_access_key) || !Trimmed(c->session_token) ||
      !absl::StrContains(text, c->secret_access_key)) {
    __builtin_trap();
  }
  return 0;
}
