// The two XML bodies an object tier reads from an S3-compatible server, parsed with expat
// (Debian's libexpat: a streaming parser with its own limits against entity expansion):
// a ListObjectsV2 result page and an error body. Anything that is not well-formed XML of
// that shape is an error, never a partial answer. Pure functions; thread-safe.
#ifndef KVSTRATA_DAEMON_TIERS_OBJECT_S3_XML_H_
#define KVSTRATA_DAEMON_TIERS_OBJECT_S3_XML_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvstrata {

struct S3Object {
  std::string key;
  uint64_t size = 0;
  absl::Time last_modified;
};

struct S3ListPage {
  std::vector<S3Object> objects;
  bool truncated = false;
  std::string next_token;  // NextContinuationToken, when truncated
};

// A <ListBucketResult>. DATA_LOSS for malformed XML, another root element, a <Contents>
// without a key, a size or a time that does not parse, or a truncated page without a token.
absl::StatusOr<S3ListPage> ParseListObjectsV2(absl::string_view xml);

struct S3Error {
  std::string code;     // e.g. "NoSuchKey", "InvalidAccessKeyId", "SignatureDoesNotMatch"
  std::string message;  // the server's words
};

// An <Error> body; nullopt-like DATA_LOSS when `xml` is not one (an empty body, HTML).
absl::StatusOr<S3Error> ParseS3Error(absl::string_view xml);

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_OBJECT_S3_XML_H_
