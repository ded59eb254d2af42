#include "daemon/tiers/object/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvstrata {
namespace {

constexpr size_t kMaxErrorText = 64 << 10;
constexpr size_t kMaxKeptText = 64 << 20;

// curl_global_init once per process, before the first handle.
void InitCurl() {
  static const bool done = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)done;
}

bool Retryable(CURLcode code) {
  return code == CURLE_SEND_ERROR || code == CURLE_RECV_ERROR || code == CURLE_GOT_NOTHING ||
         code == CURLE_PARTIAL_FILE;
}

}  // namespace

// One multi handle (its connection cache) and the easy handles it runs.
struct S3Client::Session {
  CURLM* multi = nullptr;
  std::vector<CURL*> easy;
  ~Session() {
    for (CURL* e : easy) curl_easy_cleanup(e);
    if (multi != nullptr) curl_multi_cleanup(multi);
  }
};

namespace {

// A request on the wire: its headers and where its body stands.
struct Transfer {
  S3Request* request = nullptr;
  curl_slist* headers = nullptr;
  size_t piece = 0, offset = 0;  // kPut: the next byte to send
  CURLcode code = CURLE_OK;
  char error[CURL_ERROR_SIZE] = {};
  ~Transfer() { curl_slist_free_all(headers); }
};

// Copies the part of the body bytes [at, at + n) that falls in [base, base + dest.size())
// into dest.
void CopyInto(absl::Span<char> dest, uint64_t base, uint64_t at, const char* data, size_t n) {
  const uint64_t lo = std::max<uint64_t>(at, base);
  const uint64_t hi = std::min<uint64_t>(at + n, base + dest.size());
  if (lo < hi) std::memcpy(dest.data() + (lo - base), data + (lo - at), hi - lo);
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  S3Request& r = *static_cast<Transfer*>(user)->request;
  const size_t n = size * count;
  const uint64_t at = r.received;  // the body offset of data[0]
  r.received += n;
  const bool success = r.status >= 200 && r.status < 300;
  if (success && !r.keep_body) {
    CopyInto(r.head, 0, at, data, n);
    CopyInto(r.tail, r.head.size(), at, data, n);
    return n;
  }
  const size_t cap = success ? kMaxKeptText : kMaxErrorText;
  if (r.text.size() < cap) r.text.append(data, std::min(n, cap - r.text.size()));
  return n;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  absl::string_view line(data, size * count);
  // "HTTP/1.1 200 OK": each status line (a 100 Continue too) sets the status.
  if (absl::StartsWith(line, "HTTP/")) {
    size_t sp = line.find(' ');
    if (sp != absl::string_view::npos && line.size() >= sp + 4) {
      int code = 0;
      for (char c : line.substr(sp + 1, 3)) code = code * 10 + (c - '0');
      t->request->status = code;
      t->request->received = 0;
      t->request->text.clear();
    }
  }
  return size * count;
}

size_t OnSend(char* out, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::vector<absl::string_view>& body = t->request->body;
  size_t room = size * count, written = 0;
  while (room > 0 && t->piece < body.size()) {
    absl::string_view piece = body[t->piece];
    size_t take = std::min(room, piece.size() - t->offset);
    std::memcpy(out + written, piece.data() + t->offset, take);
    written += take;
    room -= take;
    t->offset += take;
    if (t->offset == piece.size()) ++t->piece, t->offset = 0;
  }
  return written;
}

}  // namespace

S3Client::S3Client(S3ClientOptions options) : options_(std::move(options)) {}

S3Client::~S3Client() = default;

absl::StatusOr<std::unique_ptr<S3Client>> S3Client::Create(S3ClientOptions options) {
  absl::string_view rest = options.endpoint;
  const bool https = absl::ConsumePrefix(&rest, "https://");
  if (!https && !absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "endpoint '", options.endpoint, "' is not a URL: expected http(s)://host[:port]"));
  }
  absl::ConsumeSuffix(&rest, "/");
  if (rest.empty() || rest.find_first_of("/?#@ ") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "endpoint '", options.endpoint, "' is not http(s)://host[:port] (no path, no user)"));
  }
  if (options.bucket.empty()) return absl::InvalidArgumentError("the bucket is empty");
  InitCurl();
  auto client = std::unique_ptr<S3Client>(new S3Client(std::move(options)));
  const S3ClientOptions& o = client->options_;
  client->scheme_host_ = o.path_style
                             ? absl::StrCat(https ? "https://" : "http://", rest, "/", o.bucket)
                             : absl::StrCat(https ? "https://" : "http://", o.bucket, ".", rest);
  client->sigv4_ = absl::StrCat("aws:amz:", o.region, ":s3");
  return client;
}

std::string S3Client::Url(const S3Request& r) const {
  return absl::StrCat(scheme_host_, r.key.empty() ? "" : "/", r.key, r.query.empty() ? "" : "?",
                      r.query);
}

std::unique_ptr<S3Client::Session> S3Client::TakeSession() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Session> s = std::move(idle_.back());
      idle_.pop_back();
      return s;
    }
  }
  auto s = std::make_unique<Session>();
  s->multi = curl_multi_init();
  curl_multi_setopt(s->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                    static_cast<long>(options_.max_in_flight));
  return s;
}

void S3Client::GiveSession(std::unique_ptr<Session> session) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(session));
}

void S3Client::Run(absl::Span<S3Request* const> requests) {
  if (requests.empty()) return;
  std::unique_ptr<Session> session = TakeSession();
  RunOn(*session, requests);
  GiveSession(std::move(session));
}

void S3Client::RunOn(Session& session, absl::Span<S3Request* const> requests) {
  const size_t width = std::max<size_t>(1, std::min(options_.max_in_flight, requests.size()));
  while (session.easy.size() < width) session.easy.push_back(curl_easy_init());
  std::vector<CURL*> free_easy(session.easy.begin(), session.easy.begin() + width);
  std::deque<std::pair<S3Request*, int>> queue;  // request, tries left
  for (S3Request* r : requests) queue.emplace_back(r, 2);
  std::vector<std::unique_ptr<Transfer>> transfers(width);
  std::vector<int> tries(width, 0);
  size_t running = 0;
  auto start = [&](CURL* easy, size_t slot, S3Request* r, int tries_left) {
    auto t = std::make_unique<Transfer>();
    t->request = r;
    r->status = 0;
    r->received = 0;
    r->text.clear();
    r->transport_error.clear();
    r->content_length = -1;
    curl_easy_reset(easy);
    const std::string url = Url(*r);
    curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, reinterpret_cast<char*>(slot));
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t->error);
    curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, sigv4_.c_str());
    curl_easy_setopt(easy, CURLOPT_USERNAME, options_.credentials.access_key_id.c_str());
    curl_easy_setopt(easy, CURLOPT_PASSWORD, options_.credentials.secret_access_key.c_str());
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(options_.request_timeout)));
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L);
    if (!options_.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, options_.ca_file.c_str());
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, t.get());
    t->headers = curl_slist_append(t->headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!options_.credentials.session_token.empty()) {
      t->headers = curl_slist_append(
          t->headers,
          absl::StrCat("x-amz-security-token: ", options_.credentials.session_token).c_str());
    }
    switch (r->method) {
      case S3Request::Method::kGet:
        break;
      case S3Request::Method::kHead:
        curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
        break;
      case S3Request::Method::kDelete:
        curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, "DELETE");
        break;
      case S3Request::Method::kCopySelf:
      case S3Request::Method::kPut: {
        curl_off_t size = 0;
        if (r->method == S3Request::Method::kPut) {
          for (absl::string_view piece : r->body) size += static_cast<curl_off_t>(piece.size());
        } else {
          t->headers = curl_slist_append(
              t->headers,
              absl::StrCat("x-amz-copy-source: /", options_.bucket, "/", r->key).c_str());
          t->headers = curl_slist_append(t->headers, "x-amz-metadata-directive: REPLACE");
        }
        t->headers = curl_slist_append(t->headers, "Content-Type: application/octet-stream");
        curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(easy, CURLOPT_READFUNCTION, OnSend);
        curl_easy_setopt(easy, CURLOPT_READDATA, t.get());
        curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, size);
        break;
      }
    }
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t->headers);
    transfers[slot] = std::move(t);
    tries[slot] = tries_left;
    curl_multi_add_handle(session.multi, easy);
    ++running;
  };
  std::vector<size_t> free_slots;
  for (size_t i = 0; i < width; ++i) free_slots.push_back(width - 1 - i);
  auto fill = [&] {
    while (!queue.empty() && !free_slots.empty()) {
      const size_t slot = free_slots.back();
      free_slots.pop_back();
      auto [r, left] = queue.front();
      queue.pop_front();
      start(session.easy[slot], slot, r, left);
    }
  };
  fill();
  while (running > 0) {
    int still = 0;
    curl_multi_perform(session.multi, &still);
    int left = 0;
    bool done_any = false;
    while (CURLMsg* msg = curl_multi_info_read(session.multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* easy = msg->easy_handle;
      char* priv = nullptr;
      curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
      const size_t slot = reinterpret_cast<size_t>(priv);
      Transfer& t = *transfers[slot];
      S3Request& r = *t.request;
      const CURLcode code = msg->data.result;
      curl_multi_remove_handle(session.multi, easy);
      --running;
      done_any = true;
      if (code != CURLE_OK) {
        r.status = 0;
        r.transport_error = t.error[0] != '\0' ? t.error : curl_easy_strerror(code);
        if (Retryable(code) && tries[slot] > 1) queue.emplace_front(&r, tries[slot] - 1);
      } else {
        long status = 0;
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        r.status = static_cast<int>(status);
        curl_off_t length = -1;
        curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
        r.content_length = length;
      }
      transfers[slot].reset();
      free_slots.push_back(slot);
    }
    if (done_any) fill();
    if (running > 0) curl_multi_poll(session.multi, nullptr, 0, 100, nullptr);
  }
}

absl::Status S3Client::Failure(const S3Request& r) const {
  const std::string where = absl::StrCat("s3 ", options_.endpoint, " bucket ", options_.bucket);
  if (r.status == 0) {
    return absl::UnavailableError(absl::StrCat(where, ": no answer (", r.transport_error, ")"));
  }
  absl::StatusOr<S3Error> e = ParseS3Error(r.text);
  const std::string said =
      e.ok() ? absl::StrCat(e->code, ": ", e->message) : absl::StrCat("HTTP ", r.status);
  const std::string message = absl::StrCat(where, " key '", r.key, "': HTTP ", r.status, " ", said);
  const std::string code = e.ok() ? e->code : "";
  if (code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "InvalidToken" ||
      code == "ExpiredToken" || code == "AuthorizationHeaderMalformed" || r.status == 401) {
    return absl::UnauthenticatedError(message);
  }
  if (r.status == 403) return absl::PermissionDeniedError(message);
  if (r.status == 404) return absl::NotFoundError(message);
  if (r.status >= 500) return absl::UnavailableError(message);
  return absl::UnknownError(message);
}

absl::StatusOr<std::vector<S3Object>> S3Client::List(absl::string_view prefix,
                                                     absl::string_view start_after) {
  std::vector<S3Object> all;
  std::string token;
  auto escape = [](absl::string_view s) {
    char* escaped = curl_easy_escape(nullptr, s.data(), static_cast<int>(s.size()));
    std::string out = escaped != nullptr ? escaped : "";
    curl_free(escaped);
    return out;
  };
  const std::string enc_prefix = escape(prefix);
  const std::string enc_after =
      start_after.empty() ? "" : absl::StrCat("&start-after=", escape(start_after));
  for (int page = 0; page < 1'000'000; ++page) {
    S3Request r;
    r.keep_body = true;
    std::string query;
    if (!token.empty()) {
      absl::StrAppend(&query, "continuation-token=", escape(token), "&");
    }
    absl::StrAppend(&query, "list-type=2&max-keys=1000&prefix=", enc_prefix, enc_after);
    r.query = std::move(query);
    Run(r);
    if (!r.ok()) return Failure(r);
    absl::StatusOr<S3ListPage> parsed = ParseListObjectsV2(r.text);
    if (!parsed.ok()) {
      return absl::DataLossError(absl::StrCat("s3 ", options_.endpoint, " bucket ", options_.bucket,
                                              ": a listing page: ", parsed.status().message()));
    }
    for (S3Object& o : parsed->objects) all.push_back(std::move(o));
    if (!parsed->truncated) return all;
    token = parsed->next_token;
  }
  return absl::DataLossError("a listing that does not end");
}

absl::Status S3Client::Check() {
  S3Request r;
  r.keep_body = true;
  r.query = "list-type=2&max-keys=1";
  Run(r);
  if (r.ok()) return ParseListObjectsV2(r.text).status();
  return Failure(r);
}

}  // namespace kvstrata
