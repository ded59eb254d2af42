#include "daemon/tiers/object/s3_credentials.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvstrata {

absl::StatusOr<S3Credentials> ParseCredentialsFile(absl::string_view text, absl::string_view file,
                                                   absl::string_view profile) {
  S3Credentials c;
  bool in_profile = false, seen = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return absl::InvalidArgumentError(
            absl::StrCat(file, ":", line_no, ": expected a [profile] line"));
      }
      in_profile = absl::StripAsciiWhitespace(line.substr(1, line.size() - 2)) == profile;
      seen = seen || in_profile;
      continue;
    }
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ":", line_no, ": expected `key = value`"));
    }
    if (!in_profile) continue;
    absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, eq));
    std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (key == "aws_access_key_id") c.access_key_id = value;
    if (key == "aws_secret_access_key") c.secret_access_key = value;
    if (key == "aws_session_token") c.session_token = value;
  }
  if (!seen) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": no [", profile, "] profile"));
  }
  for (auto [name, value] :
       {std::pair<const char*, const std::string*>{"aws_access_key_id", &c.access_key_id},
        {"aws_secret_access_key", &c.secret_access_key}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": profile [", profile, "] has no ", name));
    }
  }
  return c;
}

absl::StatusOr<S3Credentials> LoadCredentials(const std::string& file, absl::string_view profile) {
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) {
      const int err = errno;
      std::string why =
          absl::StrCat("cannot read the credentials file ", file, ": ", std::strerror(err));
      return err == EACCES ? absl::PermissionDeniedError(why) : absl::NotFoundError(why);
    }
    std::stringstream text;
    text << in.rdbuf();
    return ParseCredentialsFile(text.str(), file, profile);
  }
  S3Credentials c;
  const char* id = std::getenv("AWS_ACCESS_KEY_ID");
  const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  const char* token = std::getenv("AWS_SESSION_TOKEN");
  if (id == nullptr || *id == '\0' || secret == nullptr || *secret == '\0') {
    return absl::FailedPreconditionError(
        "no credentials: set credentials_file, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
        "in the daemon's environment");
  }
  c.access_key_id = id;
  c.secret_access_key = secret;
  if (token != nullptr) c.session_token = token;
  return c;
}

}  // namespace kvstrata
