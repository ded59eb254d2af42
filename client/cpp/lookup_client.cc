#include "client/cpp/lookup_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "daemon/common/spin_wait.h"
#include "daemon/rpc/fast_path/lookup_wire.h"

namespace kvstrata {
namespace {

namespace wire = lookup_wire;

constexpr size_t kMaxKeys = 65536;

// How long a call polls for its answer before blocking in read: a 1,000-key lookup is
// answered in ~50 us, and a blocked reader woken from another CPU costs tens of us more on
// a VM (bench/results/cpu-2026-11-21-lookup-latency/NOTES.md).
constexpr absl::Duration kAnswerSpin = absl::Microseconds(250);

// LookupInto calls in flight in this process, over all clients: an answer is awaited by
// spinning only while they are few (see SpinUntilReadable).
std::atomic<int> calls_in_flight{0};

struct InFlight {
  InFlight() { calls_in_flight.fetch_add(1, std::memory_order_relaxed); }
  ~InFlight() { calls_in_flight.fetch_sub(1, std::memory_order_relaxed); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
};
constexpr size_t kMaxKeyBytes = 32;

absl::Status CheckKeys(absl::Span<const std::string> keys) {
  if (keys.empty() || keys.size() > kMaxKeys) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys: ", keys.size(), " keys; a lookup takes 1..", kMaxKeys));
  }
  size_t bytes = keys[0].size();
  if (bytes == 0 || bytes > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys[0] key is ", bytes, " bytes; a key is 1..32 bytes"));
  }
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i].size() != bytes) {
      return absl::InvalidArgumentError(absl::StrCat("keys[", i, "] is ", keys[i].size(),
                                                     " bytes, keys[0] ", bytes,
                                                     "; the fast path needs keys of one length"));
    }
  }
  return absl::OkStatus();
}

bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool ReadAll(int fd, char* data, size_t size) {
  while (size > 0) {
    ssize_t n = read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

absl::Status Lost(const std::string& path, const char* what) {
  return absl::UnavailableError(
      absl::StrCat("fast-path socket '", path, "': ", what, ": ", std::strerror(errno)));
}

}  // namespace

LookupClient::LookupClient(std::string socket_path, absl::Duration timeout)
    : socket_path_(std::move(socket_path)), timeout_(timeout) {}

LookupClient::~LookupClient() {
  MutexLock lock(&mu_);
  DisconnectLocked();
}

absl::StatusOr<FastLookupResult> LookupClient::Lookup(uint64_t session_id, uint32_t namespace_id,
                                                      absl::Span<const std::string> keys,
                                                      FastLookupOptions options) {
  FastLookupResult result;
  absl::Status s = LookupInto(session_id, namespace_id, keys, options, &result);
  if (!s.ok()) return s;
  return result;
}

absl::Status LookupClient::LookupInto(uint64_t session_id, uint32_t namespace_id,
                                      absl::Span<const std::string> keys, FastLookupOptions options,
                                      FastLookupResult* result) {
  if (absl::Status s = CheckKeys(keys); !s.ok()) return s;
  InFlight in_flight;
  wire::RequestHeader h;
  h.flags = options.acquire_lease ? wire::kFlagAcquireLease : 0;
  h.session_id = session_id;
  h.namespace_id = namespace_id;
  h.key_count = static_cast<uint32_t>(keys.size());
  h.key_bytes = static_cast<uint32_t>(keys[0].size());
  h.lease_ttl_ms = options.lease_ttl_ms;
  MutexLock lock(&mu_);
  if (absl::Status s = ConnectLocked(); !s.ok()) return s;
  frame_.resize(wire::kRequestHeaderBytes + keys.size() * h.key_bytes);
  wire::EncodeRequestHeader(h, frame_.data());
  char* out = frame_.data() + wire::kRequestHeaderBytes;
  for (const std::string& key : keys) out = std::copy(key.begin(), key.end(), out);
  if (!SendAll(fd_, frame_)) {
    absl::Status lost = Lost(socket_path_, "send");
    DisconnectLocked();
    return lost;
  }
  return ReadReplyLocked(result);
}

absl::Status LookupClient::ReadReplyLocked(FastLookupResult* result) {
  char header_bytes[wire::kResponseHeaderBytes];
  SpinUntilReadable(fd_, kAnswerSpin, calls_in_flight.load(std::memory_order_relaxed));
  if (!ReadAll(fd_, header_bytes, sizeof(header_bytes))) {
    absl::Status lost = Lost(socket_path_, "no answer");
    DisconnectLocked();
    return lost;
  }
  wire::ResponseHeader h = wire::DecodeResponseHeader(header_bytes);
  if (h.magic != wire::kMagic || h.tier_count != h.hit_blocks || h.tier_count > kMaxKeys ||
      h.message_bytes > wire::kMaxMessageBytes || h.status > 16) {
    DisconnectLocked();
    return absl::DataLossError("fast-path socket: malformed answer header");
  }
  frame_.resize(h.tier_count + h.message_bytes);
  if (!ReadAll(fd_, frame_.data(), frame_.size())) {
    absl::Status lost = Lost(socket_path_, "truncated answer");
    DisconnectLocked();
    return lost;
  }
  if (h.status != 0) {
    return absl::Status(static_cast<absl::StatusCode>(h.status),
                        absl::string_view(frame_.data() + h.tier_count, h.message_bytes));
  }
  result->hit_blocks = h.hit_blocks;
  result->tiers.resize(h.tier_count);
  for (uint32_t i = 0; i < h.tier_count; ++i) {
    result->tiers[i] = static_cast<v1::Tier>(static_cast<uint8_t>(frame_[i]));
  }
  result->lease_id = h.lease_id;
  result->lease_expires_unix_ms = h.lease_expires_unix_ms;
  return absl::OkStatus();
}

absl::Status LookupClient::ConnectLocked() {
  if (fd_ >= 0) return absl::OkStatus();
  sockaddr_un addr{};
  if (socket_path_.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", socket_path_));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    absl::Status status = Lost(socket_path_, "connect");
    if (fd >= 0) close(fd);
    return status;
  }
  timeval timeout = absl::ToTimeval(timeout_);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  fd_ = fd;
  return absl::OkStatus();
}

void LookupClient::DisconnectLocked() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace kvstrata
