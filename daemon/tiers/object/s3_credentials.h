// S3Credentials: the access key pair an object tier signs its requests with, from the usual
// places: a credentials file named in the tier's configuration (`credentials_file`: the
// AWS shared-credentials INI format, section `[<profile>]`, keys aws_access_key_id,
// aws_secret_access_key and optionally aws_session_token), else the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, optionally AWS_SESSION_TOKEN). The secret is
// never logged: errors name the file, the profile and the key, never a value.
// Value type and pure functions; thread-safe.
#ifndef KVSTRATA_DAEMON_TIERS_OBJECT_S3_CREDENTIALS_H_
#define KVSTRATA_DAEMON_TIERS_OBJECT_S3_CREDENTIALS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvstrata {

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" = none (long-term keys)
};

// The credentials of `profile` in the INI text `text` (of the file `file`, named in errors).
// INVALID_ARGUMENT: no such profile, a key missing or empty, a line that is not `key = value`,
// `[section]`, a comment or blank.
absl::StatusOr<S3Credentials> ParseCredentialsFile(absl::string_view text, absl::string_view file,
                                                   absl::string_view profile);

// From `file` when it is not "" (NOT_FOUND / PERMISSION_DENIED when it cannot be read), else
// from the environment (FAILED_PRECONDITION when a variable is missing or empty).
absl::StatusOr<S3Credentials> LoadCredentials(const std::string& file, absl::string_view profile);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_OBJECT_S3_CREDENTIALS_H_
