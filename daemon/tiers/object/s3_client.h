// S3Client: the requests an object tier makes to an S3-compatible bucket (GET, PUT, HEAD,
// DELETE, a copy onto itself, ListObjectsV2), over libcurl: every request signed by curl's
// own AWS Signature V4 (CURLOPT_AWS_SIGV4; payloads are sent UNSIGNED-PAYLOAD: the block
// format's checksums guard the bytes end to end), http or https (the peer verified unless
// verify_tls is off; `ca_file` names extra roots). Run() takes a batch and keeps up to
// `max_in_flight` of it on the wire at once through one curl multi handle, so a batch of
// keys is pipelined over persistent connections. The credentials are given to curl only:
// no log line and no error message carries them (curl's verbose output stays off).
//
// Thread-safe: concurrent Run()s each take a session (a multi handle with its connection
// cache and easy handles) from a pool and give it back; Run blocks on the network on the
// caller's thread for at most request_timeout per request.
#ifndef KVSTRATA_DAEMON_TIERS_OBJECT_S3_CLIENT_H_
#define KVSTRATA_DAEMON_TIERS_OBJECT_S3_CLIENT_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/tiers/object/s3_credentials.h"
#include "daemon/tiers/object/s3_xml.h"

namespace kvstrata {

struct S3ClientOptions {
  std::string endpoint;  // http://host[:port] or https://host[:port], no path
  std::string bucket;
  std::string region = "us-east-1";
  bool path_style = true;  // <endpoint>/<bucket>/<key>; else <bucket>.<host>/<key>
  bool verify_tls = true;
  std::string ca_file;  // "" = the system's roots
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration request_timeout = absl::Seconds(30);
  size_t max_in_flight = 32;  // requests of one batch on the wire at once
  S3Credentials credentials;
};

struct S3Request {
  enum class Method { kGet, kPut, kHead, kDelete, kCopySelf };
  Method method = Method::kGet;
  std::string key;    // the object's name (characters [A-Za-z0-9._/-]); "" = the bucket
  std::string query;  // e.g. "list-type=2&prefix=x": encoded, parameters in sorted order
  // kPut: the body, these pieces in order (not owned: alive until Run returns).
  std::vector<absl::string_view> body;
  // kGet of a 2xx answer: the body's first bytes go into `head`, the next into `tail`, the
  // rest is only counted; with keep_body it all goes into `text` instead (a listing).
  absl::Span<char> head, tail;
  bool keep_body = false;

  // The answer.
  int status = 0;               // HTTP status; 0 = none (transport_error says why)
  std::string transport_error;  // curl's words, when no answer came
  std::string text;             // the kept body, or a non-2xx answer's body (up to 64 KiB)
  uint64_t received = 0;        // body bytes received
  int64_t content_length = -1;  // the answer's Content-Length (HEAD: the object's size)

  bool ok() const { return status >= 200 && status < 300; }
  bool not_found() const { return status == 404; }
};

class S3Client {
 public:
  // INVALID_ARGUMENT for an endpoint that is not http(s)://host[:port] or an empty bucket.
  static absl::StatusOr<std::unique_ptr<S3Client>> Create(S3ClientOptions options);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // Runs every request (at most max_in_flight at once) and fills its answer. A request that
  // got no answer on a reused connection is tried once more (they are all idempotent).
  void Run(absl::Span<S3Request* const> requests);
  void Run(S3Request& request) {
    S3Request* one[] = {&request};
    Run(one);
  }

  // Every object whose name starts with `prefix` (ListObjectsV2, page by page), in name
  // order, only those after `start_after` where that is not empty; or the first error:
  // UNAVAILABLE (no answer), PERMISSION_DENIED / UNAUTHENTICATED (refused), DATA_LOSS (a page
  // that does not parse).
  absl::StatusOr<std::vector<S3Object>> List(absl::string_view prefix,
                                             absl::string_view start_after = "");
  // One signed request that needs the credentials and the bucket (a listing of at most one
  // key): OK, or why not (UNAUTHENTICATED: the keys were refused; NOT_FOUND: no bucket;
  // PERMISSION_DENIED; UNAVAILABLE: no answer), naming the endpoint and bucket.
  absl::Status Check();

  // A failed request's answer as a Status: UNAVAILABLE (no answer, a 5xx), UNAUTHENTICATED
  // (InvalidAccessKeyId, SignatureDoesNotMatch, ...), PERMISSION_DENIED (403), NOT_FOUND
  // (404), else UNKNOWN; the message has the server's code and words, never a credential.
  absl::Status Failure(const S3Request& request) const;
  const S3ClientOptions& options() const { return options_; }

 private:
  struct Session;
  explicit S3Client(S3ClientOptions options);
  std::unique_ptr<Session> TakeSession();
  void GiveSession(std::unique_ptr<Session> session);
  void RunOn(Session& session, absl::Span<S3Request* const> requests);
  std::string Url(const S3Request& request) const;

  const S3ClientOptions options_;
  std::string scheme_host_;  // "http://host:port"
  std::string sigv4_;        // "aws:amz:<region>:s3"
  std::mutex mu_;
  std::vector<std::unique_ptr<Session>> idle_;  // by mu_
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TIERS_OBJECT_S3_CLIENT_H_
