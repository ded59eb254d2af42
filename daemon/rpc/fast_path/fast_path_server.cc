#include "daemon/rpc/fast_path/fast_path_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/unix_listener.h"
#include "daemon/rpc/cache_convert.h"
#include "daemon/rpc/fast_path/job_wire.h"
#include "daemon/rpc/fast_path/lookup_wire.h"
#include "daemon/rpc/job_call.h"
#include "daemon/rpc/lookup_call.h"
#include "daemon/rpc/request_validation.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

namespace wire = lookup_wire;

constexpr char kMethod[] = "FastPath.Lookup";

absl::Status CheckJobHeader(const job_wire::RequestHeader& h) {
  if (h.version != job_wire::kVersion && h.version != job_wire::kVersionCompletionsHere) {
    return absl::InvalidArgumentError(
        absl::StrCat("job frame version ", h.version, " is not supported (only 1 and 2)"));
  }
  if (h.kind != job_wire::kKindStore && h.kind != job_wire::kKindLoad) {
    return absl::InvalidArgumentError(
        absl::StrCat("job kind ", h.kind, " is neither 1 (store) nor 2 (load)"));
  }
  if (absl::Status s = ValidateKeyCount(h.key_count, "key_count"); !s.ok()) return s;
  return ValidateKeySize(h.key_bytes, 0, "keys");
}

void EncodeJobReply(const absl::Status& status, uint64_t job_id, std::string* out) {
  job_wire::ResponseHeader h;
  h.status = static_cast<uint32_t>(status.code());
  h.job_id = status.ok() ? job_id : 0;
  absl::string_view message = status.message().substr(0, wire::kMaxMessageBytes);
  h.message_bytes = static_cast<uint32_t>(message.size());
  out->resize(job_wire::kResponseHeaderBytes + message.size());
  job_wire::EncodeResponseHeader(h, out->data());
  std::copy(message.begin(), message.end(), out->data() + job_wire::kResponseHeaderBytes);
}

// Splits `count` keys of `key_bytes` each out of `keys` into `views`.
void SplitKeys(const std::string& keys, uint32_t key_bytes, std::vector<std::string_view>* views) {
  views->clear();
  for (size_t at = 0; at < keys.size(); at += key_bytes) {
    views->emplace_back(keys.data() + at, key_bytes);
  }
}

absl::Status CheckHeader(const wire::RequestHeader& h) {
  if (h.magic != wire::kMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad magic 0x", absl::Hex(h.magic),
        "; a frame starts with \"KVSL\" (lookup), \"KVSJ\" (job) or \"KVSR\" (release)"));
  }
  if (h.version != wire::kVersion && h.version != wire::kVersionNamespaces) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame version ", h.version, " is not supported (only 1 and 2)"));
  }
  if (h.version == wire::kVersionNamespaces &&
      (h.namespace_id == 0 || h.namespace_id > wire::kMaxNamespaces)) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace count ", h.namespace_id, " is not in 1..", wire::kMaxNamespaces));
  }
  if ((h.flags & ~wire::kKnownFlags) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flags 0x", absl::Hex(h.flags)));
  }
  if (absl::Status s = ValidateKeyCount(h.key_count, "key_count"); !s.ok()) return s;
  return ValidateKeySize(h.key_bytes, 0, "keys");
}

// Encodes the response frame for `status` (and `answer` when it is OK) into `out`.
void EncodeReply(const absl::Status& status, const LookupAnswer* answer, std::string* out) {
  wire::ResponseHeader h;
  h.status = static_cast<uint32_t>(status.code());
  absl::string_view message = status.message().substr(0, wire::kMaxMessageBytes);
  h.message_bytes = static_cast<uint32_t>(message.size());
  if (status.ok() && answer != nullptr) {
    h.hit_blocks = static_cast<uint32_t>(answer->result.hits);
    h.tier_count = static_cast<uint32_t>(answer->result.tiers.size());
    h.lease_id = answer->result.lease.value_or(0);
    h.lease_expires_unix_ms = answer->lease_expires_unix_ms;
  }
  out->resize(wire::kResponseHeaderBytes + h.tier_count + message.size());
  wire::EncodeResponseHeader(h, out->data());
  char* tiers = out->data() + wire::kResponseHeaderBytes;
  for (uint32_t i = 0; i < h.tier_count; ++i) {
    tiers[i] = static_cast<char>(TierWire(answer->result.tiers[i]));  // common.proto Tier
  }
  std::copy(message.begin(), message.end(), tiers + h.tier_count);
}

// The version-2 response: version 1's header, then (when OK) one lease id per namespace.
void EncodeNamespacesReply(const absl::Status& status, const NamespacesAnswer* answer,
                           std::string* out) {
  wire::ResponseHeader h;
  h.status = static_cast<uint32_t>(status.code());
  absl::string_view message = status.message().substr(0, wire::kMaxMessageBytes);
  h.message_bytes = static_cast<uint32_t>(message.size());
  size_t lease_bytes = 0;
  if (status.ok() && answer != nullptr) {
    h.hit_blocks = static_cast<uint32_t>(answer->hits);
    h.tier_count = static_cast<uint32_t>(answer->tiers.size());
    h.lease_expires_unix_ms = answer->lease_expires_unix_ms;
    lease_bytes = answer->leases.size() * sizeof(uint64_t);
  }
  out->resize(wire::kResponseHeaderBytes + lease_bytes + h.tier_count + message.size());
  wire::EncodeResponseHeader(h, out->data());
  char* at = out->data() + wire::kResponseHeaderBytes;
  if (lease_bytes != 0) {
    for (LeaseId lease : answer->leases) at = wire::internal::Put(at, lease);
  }
  for (uint32_t i = 0; i < h.tier_count; ++i) {
    *at++ = static_cast<char>(TierWire(answer->tiers[i]));  // common.proto Tier
  }
  std::copy(message.begin(), message.end(), at);
}

// The answer to a release frame: a lookup response, hit_blocks = leases released.
void EncodeReleaseReply(const absl::Status& status, uint32_t released, std::string* out) {
  LookupAnswer answer;  // no tiers, no lease
  answer.result.hits = released;
  EncodeReply(status, &answer, out);
}

// The refusal of a connection about to be closed: written only if the socket has room now.
void SendRefusal(int fd, const absl::Status& status) {
  std::string reply;
  EncodeReply(status, nullptr, &reply);
  ConnectionWriter(fd).Send(reply, /*timeout_ms=*/0);
}

}  // namespace

struct FastPathServer::FrameBuffers {
  std::string keys;
  std::vector<std::string_view> views;
  std::vector<uint32_t> block_ids;
  std::vector<uint32_t> namespaces;  // a version-2 lookup frame's
  std::vector<uint64_t> leases;      // a release frame's
  std::string reply;
};

absl::StatusOr<std::unique_ptr<FastPathServer>> FastPathServer::Start(const std::string& path,
                                                                      uint32_t mode,
                                                                      ServiceContext context,
                                                                      MetricsSink* metrics) {
  absl::StatusOr<int> fd = ListenUnix(path, mode);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<FastPathServer> server(
      new FastPathServer(path, *fd, std::move(context), metrics));
  server->accept_thread_ = std::thread([raw = server.get()] { raw->AcceptLoop(); });
  return server;
}

FastPathServer::FastPathServer(std::string path, int listen_fd, ServiceContext context,
                               MetricsSink* metrics)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      context_(std::move(context)),
      metrics_(metrics) {}

FastPathServer::~FastPathServer() { Stop(); }

void FastPathServer::Stop() {
  if (stop_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  connections_.StopAll();
  close(listen_fd_);
  unlink(path_.c_str());
}

void FastPathServer::AcceptLoop() {
  while (!stop_.load()) {
    connections_.ReapFinished();
    pollfd waiting{listen_fd_, POLLIN, 0};
    if (poll(&waiting, 1, 100) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) Admit(fd);
  }
}

void FastPathServer::Admit(int fd) {
  // Full: make room by closing the connection idle the longest (at least 1 s), so idle
  // connections cannot lock new callers out; refuse only when every one is busy.
  if (connections_.full() && !connections_.EvictIdlest(absl::Seconds(1))) {
    spdlog::warn("lookup_socket_refused reason=\"{} connections open\"", connections_.size());
    SendRefusal(fd, absl::ResourceExhaustedError(absl::StrCat(
                        "the fast-path socket serves at most ", kMaxConnections, " connections")));
    close(fd);
    return;
  }
  absl::StatusOr<Caller> caller = context_.tenants->ForConnection(fd);
  if (!caller.ok()) {
    spdlog::warn("lookup_socket_refused reason=\"{}\"", std::string(caller.status().message()));
    SendRefusal(fd, caller.status());
    close(fd);
    return;
  }
  timeval timeout{1, 0};  // ReadFull counts these to kFrameTimeoutSeconds.
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  timeval send_timeout{kFrameTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  if (!connections_.Start(
          fd, [this, tenant = caller->tenant](int connection, std::atomic<int64_t>* idle) {
            Serve(connection, tenant, idle);
          })) {
    close(fd);
  }
}

bool FastPathServer::ReadFull(int fd, char* data, size_t size, bool frame_start,
                              std::atomic<int64_t>* idle_since_ms) const {
  if (idle_since_ms != nullptr) idle_since_ms->store(absl::ToUnixMillis(absl::Now()));
  size_t got = 0;
  int stalls = 0;
  while (got < size) {
    ssize_t n = read(fd, data + got, size - got);
    if (n > 0) {
      if (idle_since_ms != nullptr) idle_since_ms->store(0);  // a frame has started
      got += static_cast<size_t>(n);
      stalls = 0;
      continue;
    }
    if (n == 0 || stop_.load()) return false;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
    bool idle = frame_start && got == 0;
    if (!idle && ++stalls >= kFrameTimeoutSeconds) return false;
  }
  return true;
}

bool FastPathServer::ServeJob(int fd, TenantId tenant, const char* first_bytes,
                              FrameBuffers& buffers,
                              const std::shared_ptr<ConnectionWriter>& writer) const {
  absl::Time start = absl::Now();
  char header_bytes[job_wire::kRequestHeaderBytes];
  std::copy(first_bytes, first_bytes + wire::kRequestHeaderBytes, header_bytes);
  if (!ReadFull(fd, header_bytes + wire::kRequestHeaderBytes,
                job_wire::kRequestHeaderBytes - wire::kRequestHeaderBytes, false)) {
    return false;
  }
  job_wire::RequestHeader h = job_wire::DecodeRequestHeader(header_bytes);
  const char* method =
      h.kind == job_wire::kKindStore ? "FastPath.SubmitStore" : "FastPath.SubmitLoad";
  if (absl::Status s = CheckJobHeader(h); !s.ok()) {
    metrics_->RecordRpc(method, absl::StatusCodeToString(s.code()), absl::Now() - start);
    EncodeJobReply(s, 0, &buffers.reply);
    writer->Send(buffers.reply);
    return false;  // The rest of the frame cannot be trusted: close.
  }
  buffers.keys.resize(static_cast<size_t>(h.key_count) * h.key_bytes);
  buffers.block_ids.resize(h.key_count);
  if (!ReadFull(fd, buffers.keys.data(), buffers.keys.size(), false) ||
      !ReadFull(fd, reinterpret_cast<char*>(buffers.block_ids.data()),
                buffers.block_ids.size() * sizeof(uint32_t), false)) {
    return false;
  }
  for (uint32_t& id : buffers.block_ids) id = le32toh(id);
  SplitKeys(buffers.keys, h.key_bytes, &buffers.views);
  JobCall call{h.kind == job_wire::kKindStore ? JobCall::Kind::kStore : JobCall::Kind::kLoad,
               tenant,
               h.session_id,
               h.namespace_id,
               h.registration_id,
               buffers.views,
               buffers.block_ids,
               h.kind == job_wire::kKindStore ? h.event : 0,
               h.lease_id,
               h.kind == job_wire::kKindLoad ? h.event : 0,
               h.version == job_wire::kVersionCompletionsHere ? writer : nullptr};
  absl::StatusOr<uint64_t> job = RunSubmitJob(context_, call);
  EncodeJobReply(job.status(), job.value_or(0), &buffers.reply);
  metrics_->RecordRpc(method, absl::StatusCodeToString(job.status().code()), absl::Now() - start);
  return writer->Send(buffers.reply);
}

bool FastPathServer::ServeRelease(int fd, TenantId tenant, const char* first_bytes,
                                  FrameBuffers& buffers, ConnectionWriter& writer) const {
  constexpr char kReleaseMethod[] = "FastPath.ReleaseLeases";
  absl::Time start = absl::Now();
  static_assert(wire::kReleaseHeaderBytes <= wire::kRequestHeaderBytes);
  wire::ReleaseHeader h = wire::DecodeReleaseHeader(first_bytes);
  // The 8 header bytes past the release header already belong to the ids.
  const size_t early = wire::kRequestHeaderBytes - wire::kReleaseHeaderBytes;
  absl::Status check = absl::OkStatus();
  if (h.version != wire::kReleaseVersion || h.flags != 0 || h.reserved != 0) {
    check = absl::InvalidArgumentError(absl::StrCat("release frame version ", h.version, " flags ",
                                                    h.flags, " reserved ", h.reserved,
                                                    " (only version 1, flags and reserved 0)"));
  } else if (h.lease_count == 0 || h.lease_count > wire::kMaxReleaseLeases) {
    check = absl::InvalidArgumentError(
        absl::StrCat("lease_count ", h.lease_count, " is not in 1..", wire::kMaxReleaseLeases));
  }
  if (!check.ok()) {
    metrics_->RecordRpc(kReleaseMethod, absl::StatusCodeToString(check.code()),
                        absl::Now() - start);
    EncodeReleaseReply(check, 0, &buffers.reply);
    writer.Send(buffers.reply);
    return false;  // The rest of the frame cannot be trusted: close.
  }
  buffers.leases.resize(h.lease_count);
  char* ids = reinterpret_cast<char*>(buffers.leases.data());
  std::copy(first_bytes + wire::kReleaseHeaderBytes, first_bytes + wire::kRequestHeaderBytes, ids);
  if (!ReadFull(fd, ids + early, h.lease_count * sizeof(uint64_t) - early, false)) return false;
  uint32_t released = 0;
  absl::Status status = context_.sessions->Check(h.session_id, tenant);
  if (status.ok()) {
    for (uint64_t& id : buffers.leases) {
      if (context_.cache->ReleaseLease(h.session_id, le64toh(id)).ok()) ++released;
    }
  }
  EncodeReleaseReply(status, released, &buffers.reply);
  metrics_->RecordRpc(kReleaseMethod, absl::StatusCodeToString(status.code()), absl::Now() - start);
  return writer.Send(buffers.reply);
}

void FastPathServer::WaitWarm(int fd, absl::Time last_frame) const {
  const timespec sleep = absl::ToTimespec(kWarmSleep);
  while (!stop_.load() && absl::Now() - last_frame < kWarmWindow) {
    pollfd readable{fd, POLLIN, 0};
    if (ppoll(&readable, 1, &sleep, nullptr) != 0) return;  // Ready, hung up or failed.
  }
}

void FastPathServer::Serve(int fd, TenantId tenant, std::atomic<int64_t>* idle_since_ms) const {
  FrameBuffers buffers;
  // Completions of this connection's jobs may still come after it ends: they go to the queue.
  auto writer = std::make_shared<ConnectionWriter>(fd);
  absl::Cleanup close_writer = [&writer] { writer->Close(); };
  char header_bytes[wire::kRequestHeaderBytes];
  absl::Time last_frame = absl::InfinitePast();
  while (true) {
    WaitWarm(fd, last_frame);
    if (!ReadFull(fd, header_bytes, sizeof(header_bytes), /*frame_start=*/true, idle_since_ms)) {
      return;
    }
    last_frame = absl::Now();
    uint32_t magic = 0;
    wire::internal::Get(header_bytes, &magic);
    if (magic == job_wire::kMagic) {
      if (!ServeJob(fd, tenant, header_bytes, buffers, writer)) return;
      continue;
    }
    if (magic == wire::kReleaseMagic) {
      if (!ServeRelease(fd, tenant, header_bytes, buffers, *writer)) return;
      continue;
    }
    absl::Time start = absl::Now();
    wire::RequestHeader h = wire::DecodeRequestHeader(header_bytes);
    if (absl::Status s = CheckHeader(h); !s.ok()) {
      metrics_->RecordRpc(kMethod, absl::StatusCodeToString(s.code()), absl::Now() - start);
      EncodeReply(s, nullptr, &buffers.reply);
      writer->Send(buffers.reply);
      return;
    }
    if (h.version == wire::kVersionNamespaces) {
      buffers.namespaces.resize(h.namespace_id);
      if (!ReadFull(fd, reinterpret_cast<char*>(buffers.namespaces.data()),
                    buffers.namespaces.size() * sizeof(uint32_t), false)) {
        return;
      }
      for (uint32_t& ns : buffers.namespaces) ns = le32toh(ns);
    }
    buffers.keys.resize(static_cast<size_t>(h.key_count) * h.key_bytes);
    if (!ReadFull(fd, buffers.keys.data(), buffers.keys.size(), false)) return;
    SplitKeys(buffers.keys, h.key_bytes, &buffers.views);
    if (h.version == wire::kVersionNamespaces) {
      absl::StatusOr<NamespacesAnswer> answer = RunLookups(
          context_,
          {tenant, h.session_id, 0, buffers.views, (h.flags & wire::kFlagAcquireLease) != 0,
           h.lease_ttl_ms, (h.flags & wire::kFlagSkipPromotion) != 0},
          buffers.namespaces);
      EncodeNamespacesReply(answer.status(), answer.ok() ? &*answer : nullptr, &buffers.reply);
      metrics_->RecordRpc(kMethod, absl::StatusCodeToString(answer.status().code()),
                          absl::Now() - start);
      if (!writer->Send(buffers.reply)) return;
      continue;
    }
    absl::StatusOr<LookupAnswer> answer =
        RunLookup(context_, {tenant, h.session_id, h.namespace_id, buffers.views,
                             (h.flags & wire::kFlagAcquireLease) != 0, h.lease_ttl_ms,
                             (h.flags & wire::kFlagSkipPromotion) != 0});
    EncodeReply(answer.status(), answer.ok() ? &*answer : nullptr, &buffers.reply);
    metrics_->RecordRpc(kMethod, absl::StatusCodeToString(answer.status().code()),
                        absl::Now() - start);
    if (!writer->Send(buffers.reply)) return;
  }
}

}  // namespace kvstrata
