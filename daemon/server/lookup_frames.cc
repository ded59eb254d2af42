#include "daemon/server/lookup_frames.h"

#include <endian.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/job_wire.h"
#include "daemon/common/lookup_wire.h"
#include "daemon/rpc/job_call.h"
#include "daemon/rpc/lookup_call.h"
#include "daemon/rpc/request_validation.h"

namespace kvstrata {
namespace {

namespace wire = lookup_wire;

constexpr char kLookupMethod[] = "LookupSocket.Lookup";

uint32_t MagicOf(std::string_view in) {
  uint32_t magic = 0;
  wire::internal::Get(in.data(), &magic);
  return magic;
}

absl::Status CheckLookupHeader(const wire::RequestHeader& h) {
  if (h.magic != wire::kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad magic 0x", absl::Hex(h.magic),
                     "; a frame starts with \"KVSL\" (lookup) or \"KVSJ\" (job)"));
  }
  if (h.version != wire::kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame version ", h.version, " is not supported (only 1)"));
  }
  if ((h.flags & ~wire::kKnownFlags) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flags 0x", absl::Hex(h.flags)));
  }
  if (absl::Status s = ValidateKeyCount(h.key_count, "key_count"); !s.ok()) return s;
  return ValidateKeySize(h.key_bytes, 0, "keys");
}

absl::Status CheckJobHeader(const job_wire::RequestHeader& h) {
  if (h.version != job_wire::kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("job frame version ", h.version, " is not supported (only 1)"));
  }
  if (h.kind != job_wire::kKindStore && h.kind != job_wire::kKindLoad) {
    return absl::InvalidArgumentError(
        absl::StrCat("job kind ", h.kind, " is neither 1 (store) nor 2 (load)"));
  }
  if (absl::Status s = ValidateKeyCount(h.key_count, "key_count"); !s.ok()) return s;
  return ValidateKeySize(h.key_bytes, 0, "keys");
}

// Appends the lookup response frame for `status` (and `answer` when it is OK) to `out`.
void AppendLookupReply(const absl::Status& status, const LookupAnswer* answer, std::string* out) {
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
  const size_t at = out->size();
  out->resize(at + wire::kResponseHeaderBytes + h.tier_count + message.size());
  wire::EncodeResponseHeader(h, out->data() + at);
  char* tiers = out->data() + at + wire::kResponseHeaderBytes;
  for (uint32_t i = 0; i < h.tier_count; ++i) {
    tiers[i] = static_cast<char>(TierWire(answer->result.tiers[i]));  // common.proto Tier
  }
  std::copy(message.begin(), message.end(), tiers + h.tier_count);
}

void AppendJobReply(const absl::Status& status, uint64_t job_id, std::string* out) {
  job_wire::ResponseHeader h;
  h.status = static_cast<uint32_t>(status.code());
  h.job_id = status.ok() ? job_id : 0;
  absl::string_view message = status.message().substr(0, wire::kMaxMessageBytes);
  h.message_bytes = static_cast<uint32_t>(message.size());
  const size_t at = out->size();
  out->resize(at + job_wire::kResponseHeaderBytes + message.size());
  job_wire::EncodeResponseHeader(h, out->data() + at);
  std::copy(message.begin(), message.end(), out->data() + at + job_wire::kResponseHeaderBytes);
}

// `count` keys of `key_bytes` each, back to back at the front of `keys`.
void SplitKeys(std::string_view keys, uint32_t count, uint32_t key_bytes,
               std::vector<std::string_view>* views) {
  views->clear();
  for (uint32_t i = 0; i < count; ++i)
    views->push_back(keys.substr(size_t{i} * key_bytes, key_bytes));
}

}  // namespace

size_t LookupFrames::FrameBytes(std::string_view in) const {
  if (in.size() < wire::kRequestHeaderBytes) return 0;
  if (MagicOf(in) == job_wire::kMagic) {
    if (in.size() < job_wire::kRequestHeaderBytes) return 0;
    job_wire::RequestHeader h = job_wire::DecodeRequestHeader(in.data());
    if (!CheckJobHeader(h).ok()) return job_wire::kRequestHeaderBytes;
    return job_wire::kRequestHeaderBytes + size_t{h.key_count} * h.key_bytes +
           size_t{h.key_count} * sizeof(uint32_t);
  }
  wire::RequestHeader h = wire::DecodeRequestHeader(in.data());
  if (!CheckLookupHeader(h).ok()) return wire::kRequestHeaderBytes;
  return wire::kRequestHeaderBytes + size_t{h.key_count} * h.key_bytes;
}

bool LookupFrames::Answer(TenantId tenant, std::string_view frame, Scratch& scratch,
                          std::string* out) const {
  return MagicOf(frame) == job_wire::kMagic ? AnswerJob(tenant, frame, scratch, out)
                                            : AnswerLookup(tenant, frame, scratch, out);
}

bool LookupFrames::AnswerLookup(TenantId tenant, std::string_view frame, Scratch& scratch,
                                std::string* out) const {
  const absl::Time start = absl::Now();
  wire::RequestHeader h = wire::DecodeRequestHeader(frame.data());
  if (absl::Status s = CheckLookupHeader(h); !s.ok()) {
    metrics_->RecordRpc(kLookupMethod, absl::StatusCodeToString(s.code()), absl::Now() - start);
    AppendLookupReply(s, nullptr, out);
    return false;  // The rest of the frame cannot be trusted: close.
  }
  SplitKeys(frame.substr(wire::kRequestHeaderBytes), h.key_count, h.key_bytes, &scratch.views);
  absl::StatusOr<LookupAnswer> answer =
      RunLookup(context_, {tenant, h.session_id, h.namespace_id, scratch.views,
                           (h.flags & wire::kFlagAcquireLease) != 0, h.lease_ttl_ms});
  AppendLookupReply(answer.status(), answer.ok() ? &*answer : nullptr, out);
  metrics_->RecordRpc(kLookupMethod, absl::StatusCodeToString(answer.status().code()),
                      absl::Now() - start);
  return true;
}

bool LookupFrames::AnswerJob(TenantId tenant, std::string_view frame, Scratch& scratch,
                             std::string* out) const {
  const absl::Time start = absl::Now();
  job_wire::RequestHeader h = job_wire::DecodeRequestHeader(frame.data());
  const char* method =
      h.kind == job_wire::kKindStore ? "LookupSocket.SubmitStore" : "LookupSocket.SubmitLoad";
  if (absl::Status s = CheckJobHeader(h); !s.ok()) {
    metrics_->RecordRpc(method, absl::StatusCodeToString(s.code()), absl::Now() - start);
    AppendJobReply(s, 0, out);
    return false;  // The rest of the frame cannot be trusted: close.
  }
  const std::string_view keys = frame.substr(job_wire::kRequestHeaderBytes);
  SplitKeys(keys, h.key_count, h.key_bytes, &scratch.views);
  const char* ids = keys.data() + size_t{h.key_count} * h.key_bytes;
  scratch.block_ids.resize(h.key_count);
  std::memcpy(scratch.block_ids.data(), ids, scratch.block_ids.size() * sizeof(uint32_t));
  for (uint32_t& id : scratch.block_ids) id = le32toh(id);
  const bool store = h.kind == job_wire::kKindStore;
  JobCall call{store ? JobCall::Kind::kStore : JobCall::Kind::kLoad,
               tenant,
               h.session_id,
               h.namespace_id,
               h.registration_id,
               scratch.views,
               scratch.block_ids,
               store ? h.event : 0,
               h.lease_id,
               store ? 0 : h.event};
  absl::StatusOr<uint64_t> job = RunSubmitJob(context_, call);
  AppendJobReply(job.status(), job.value_or(0), out);
  metrics_->RecordRpc(method, absl::StatusCodeToString(job.status().code()), absl::Now() - start);
  return true;
}

std::string LookupFrames::ErrorFrame(const absl::Status& status) {
  std::string out;
  AppendLookupReply(status, nullptr, &out);
  return out;
}

}  // namespace kvstrata
