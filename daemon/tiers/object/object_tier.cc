// ObjectTier: index, reads, writes, probes, removals (its background round and trim are in
// object_trim.cc, its maker in object_tier_kind.cc).
#include "daemon/tiers/object/object_tier.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/namespace_file.h"
#include "daemon/tiers/shared_usage.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

const std::string& Zeros() {
  static const std::string zeros(kBlockFileAlignment, '\0');
  return zeros;
}

}  // namespace

ObjectTier::ObjectTier(ObjectTierOptions options, std::unique_ptr<S3Client> s3)
    : options_(std::move(options)),
      s3_(std::move(s3)),
      clock_(options_.clock != nullptr ? options_.clock : SystemClock::Get()),
      usage_(s3_.get(), absl::StrCat(options_.prefix, "/.kvstrata"), SharedUsage::MakeHolderId(),
             options_.holder_expiry) {
  if (options_.follow_interval > absl::ZeroDuration()) {
    journal_ =
        std::make_unique<ObjectJournal>(s3_.get(), absl::StrCat(options_.prefix, "/.kvstrata"),
                                        usage_.holder(), options_.followed_presence_ttl);
  }
  counters_.capacity_bytes = options_.capacity_bytes;
  counters_.effective_bytes = options_.capacity_bytes;
  counters_.warm = true;  // No warm-up: the bucket is the index.
}

absl::StatusOr<std::unique_ptr<ObjectTier>> ObjectTier::Open(ObjectTierOptions options) {
  absl::StatusOr<std::unique_ptr<S3Client>> s3 = S3Client::Create(options.s3);
  if (!s3.ok()) return s3.status();
  if (absl::Status s = (*s3)->Check(); !s.ok()) return s;
  auto tier = std::unique_ptr<ObjectTier>(new ObjectTier(std::move(options), *std::move(s3)));
  {
    UsageRecord fresh;
    fresh.unix_ms = tier->NowMs();
    if (absl::Status s = tier->usage_.Publish(fresh); !s.ok()) return s;
  }
  // The blocks the other daemons wrote lately, before the first lookup (at most 2 s here;
  // the follower thread reads the rest).
  tier->Follow(absl::Seconds(2));
  tier->background_ = std::thread([t = tier.get()] { t->Loop(); });
  if (tier->journal_ != nullptr)
    tier->follower_ = std::thread([t = tier.get()] { t->FollowLoop(); });
  return tier;
}

ObjectTier::~ObjectTier() { Stop(); }

void ObjectTier::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    if (stopping_.exchange(true)) return;
  }
  wake_.notify_all();
  if (background_.joinable()) background_.join();
  if (follower_.joinable()) follower_.join();
  if (journal_ != nullptr)
    (void)journal_->Flush(clock_->Now());  // The last writes, for the others.
  std::lock_guard<std::mutex> lock(usage_mu_);
  UsageRecord snapshot;
  {
    MutexLock l(&mu_);
    own_.held -= std::min(own_.held, grant_left_);
    grant_left_ = 0;
    own_.unix_ms = NowMs();
    snapshot = own_;
  }
  (void)usage_.Publish(snapshot);  // The unused grant goes back (failing that, it expires).
}

std::string ObjectTier::ObjectName(const TierNamespace& ns, absl::string_view key) const {
  return *BlockFilePath(options_.prefix, ns.fingerprint, key);
}

NamespaceId ObjectTier::IdOf(const TierNamespace& ns) const {
  return options_.namespace_ids != nullptr ? options_.namespace_ids->IdOf(ns.fingerprint) : ns.id;
}

void ObjectTier::SeenLocked(const std::string& name, const TierNamespace& ns, absl::string_view key,
                            uint64_t bytes, bool announce) {
  absent_until_.erase(name);
  auto [it, added] = index_.try_emplace(name);
  Entry& e = it->second;
  e.bytes = bytes;
  e.verified = clock_->Now();
  if (added) {
    e.ns = IdOf(ns);
    e.key = std::string(key);
    e.recorded_access = e.verified;
  }
  if (announce && !e.announced && options_.observer && e.ns != 0) {
    e.announced = true;
    options_.observer(e.ns, key, /*stored=*/true, RemovalCause::kEvicted);
  }
}

void ObjectTier::GoneLocked(const std::string& name, RemovalCause cause) {
  absent_until_[name] = clock_->Now() + options_.negative_cache_ttl;
  if (absent_until_.size() > (1u << 20)) absent_until_.clear();
  auto it = index_.find(name);
  if (it == index_.end()) return;
  if (it->second.announced && options_.observer) {
    options_.observer(it->second.ns, it->second.key, /*stored=*/false, cause);
  }
  index_.erase(it);
}

BlockTier::Presence ObjectTier::CachedImpl(const TierNamespace& ns, absl::string_view key) const {
  const std::string name = ObjectName(ns, key);
  const absl::Time now = clock_->Now();
  MutexLock lock(&mu_);
  if (auto it = index_.find(name); it != index_.end()) {
    const absl::Duration age = now - it->second.verified;
    if (age < options_.presence_ttl) return Presence::kPresent;
    const absl::Duration stale_for =
        now < follow_ok_until_
            ? std::max(options_.followed_presence_ttl, options_.stale_presence_ttl)
            : options_.stale_presence_ttl;
    return age < stale_for ? Presence::kStale : Presence::kUnknown;
  }
  auto absent = absent_until_.find(name);
  return absent != absent_until_.end() && now < absent->second ? Presence::kAbsent
                                                               : Presence::kUnknown;
}

bool ObjectTier::ProbeImpl(const TierNamespace& ns, absl::string_view key) {
  const absl::string_view keys[] = {key};
  return ProbeManyImpl(ns, keys)[0];
}

std::vector<bool> ObjectTier::ProbeManyImpl(const TierNamespace& ns,
                                            absl::Span<const absl::string_view> keys) {
  std::vector<S3Request> heads(keys.size());
  std::vector<S3Request*> batch;
  for (size_t i = 0; i < keys.size(); ++i) {
    heads[i].method = S3Request::Method::kHead;
    heads[i].key = ObjectName(ns, keys[i]);
    batch.push_back(&heads[i]);
  }
  s3_->Run(batch);
  std::vector<bool> found(keys.size(), false);
  const uint64_t expected = BlockFileBytes(ns.payload_bytes);
  MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    const S3Request& h = heads[i];
    if (h.ok() && h.content_length >= static_cast<int64_t>(kBlockHeaderBytes + ns.payload_bytes)) {
      found[i] = true;
      SeenLocked(h.key, ns, keys[i], static_cast<uint64_t>(h.content_length), false);
    } else if (h.not_found() || h.ok()) {  // absent, or too short to be this block
      GoneLocked(h.key, RemovalCause::kEvicted);
    }
    (void)expected;
  }
  return found;
}

bool ObjectTier::ReadImpl(const TierNamespace& ns, absl::string_view key, absl::Span<char> dest) {
  const absl::string_view keys[] = {key};
  const absl::Span<char> dests[] = {dest};
  return ReadManyImpl(ns, keys, dests)[0];
}

std::vector<bool> ObjectTier::ReadManyImpl(const TierNamespace& ns,
                                           absl::Span<const absl::string_view> keys,
                                           absl::Span<const absl::Span<char>> dests) {
  std::vector<S3Request> gets(keys.size());
  std::vector<std::string> headers(keys.size(), std::string(kBlockHeaderBytes, '\0'));
  std::vector<S3Request*> batch;
  for (size_t i = 0; i < keys.size(); ++i) {
    gets[i].key = ObjectName(ns, keys[i]);
    gets[i].head = absl::MakeSpan(headers[i]);
    gets[i].tail = dests[i];
    batch.push_back(&gets[i]);
  }
  s3_->Run(batch);
  std::vector<bool> hit(keys.size(), false);
  std::vector<std::pair<std::string, uint64_t>> corrupt;
  {
    MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (size_t i = 0; i < keys.size(); ++i) {
      const S3Request& g = gets[i];
      if (g.not_found()) {
        GoneLocked(g.key, RemovalCause::kEvicted);
        continue;
      }
      if (!g.ok()) {
        ++counters_.read_errors;  // no answer, or refused: a miss
        continue;
      }
      absl::StatusOr<BlockHeader> header =
          g.received >= kBlockHeaderBytes + dests[i].size()
              ? DecodeBlockHeader(headers[i], ns.fingerprint, keys[i])
              : absl::DataLossError("short object");
      const absl::string_view payload(dests[i].data(), dests[i].size());
      if (!header.ok() || header->payload_bytes != dests[i].size() ||
          !PayloadChecksumOk(*header, payload)) {
        ++counters_.quarantined;
        spdlog::warn("{}: object {} fails verification ({}): deleted, a miss", options_.name, g.key,
                     header.ok() ? "payload checksum" : header.status().ToString());
        corrupt.emplace_back(g.key, g.received);
        GoneLocked(g.key, RemovalCause::kEvicted);
        continue;
      }
      hit[i] = true;
      SeenLocked(g.key, ns, keys[i], g.received, false);
      Entry& e = index_[g.key];
      if (now - e.recorded_access >= options_.access_record_interval) {
        e.recorded_access = now;
        if (touch_.size() < 100'000) touch_.push_back(g.key);
      }
    }
  }
  if (!corrupt.empty()) DeleteObjects(corrupt, RemovalCause::kEvicted);
  return hit;
}

absl::StatusOr<BlockTier::WriteOutcome> ObjectTier::WriteImpl(const TierNamespace& ns,
                                                              absl::string_view key,
                                                              absl::string_view payload) {
  const absl::string_view keys[] = {key};
  const absl::string_view payloads[] = {payload};
  return std::move(WriteManyImpl(ns, keys, payloads)[0]);
}

std::vector<absl::StatusOr<BlockTier::WriteOutcome>> ObjectTier::WriteManyImpl(
    const TierNamespace& ns, absl::Span<const absl::string_view> keys,
    absl::Span<const absl::string_view> payloads) {
  std::vector<absl::StatusOr<WriteOutcome>> out(keys.size(), WriteOutcome::kWritten);
  // A key this daemon saw lately is there; one seen longer ago is probed first (another
  // daemon may have deleted it).
  std::vector<size_t> unsure;
  std::vector<absl::string_view> unsure_keys;
  std::vector<bool> to_write(keys.size(), true);  // Not known present, admitted.
  bool namespace_file = false;
  {
    MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = index_.find(ObjectName(ns, keys[i]));
      if (it == index_.end()) continue;
      if (now - it->second.verified < options_.presence_ttl) {
        out[i] = WriteOutcome::kAlreadyPresent;
        to_write[i] = false;
      } else {
        unsure.push_back(i);
        unsure_keys.push_back(keys[i]);
      }
    }
    namespace_file = namespace_files_.insert(ns.fingerprint).second;
  }
  if (!unsure.empty()) {
    std::vector<bool> there = ProbeManyImpl(ns, unsure_keys);
    for (size_t j = 0; j < unsure.size(); ++j) {
      if (there[j]) {
        out[unsure[j]] = WriteOutcome::kAlreadyPresent;
        to_write[unsure[j]] = false;
      }
    }
  }
  const uint64_t object_bytes = BlockFileBytes(ns.payload_bytes);
  const uint64_t padding = object_bytes - kBlockHeaderBytes - ns.payload_bytes;
  std::vector<S3Request> puts(keys.size() + 1);
  std::vector<std::string> headers(keys.size());
  std::vector<S3Request*> batch;
  const std::string json = namespace_file ? NamespaceToJson(ns.spec) : "";
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!to_write[i]) continue;
    if (absl::Status room = Admit(object_bytes); !room.ok()) {
      out[i] = room;
      to_write[i] = false;
      continue;
    }
    headers[i] = EncodeBlockHeader(
        *MakeBlockHeader(ns.fingerprint, keys[i], payloads[i], static_cast<uint64_t>(NowMs())));
    puts[i].method = S3Request::Method::kPut;
    puts[i].key = ObjectName(ns, keys[i]);
    puts[i].body = {headers[i], payloads[i], absl::string_view(Zeros()).substr(0, padding)};
    batch.push_back(&puts[i]);
  }
  if (namespace_file) {
    puts.back().method = S3Request::Method::kPut;
    puts.back().key = absl::StrCat(options_.prefix, "/", ns.fingerprint, "/", kNamespaceFileName);
    puts.back().body = {json};
    batch.push_back(&puts.back());
  }
  s3_->Run(batch);
  if (namespace_file && !puts.back().ok()) {
    MutexLock lock(&mu_);
    namespace_files_.erase(ns.fingerprint);  // Tried again with the next write.
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!to_write[i]) continue;
    const bool ok = puts[i].ok();
    EndWrite(object_bytes, ok);
    if (ok && journal_ != nullptr) journal_->Record(ns.fingerprint, keys[i], object_bytes);
    MutexLock lock(&mu_);
    if (ok) {
      SeenLocked(puts[i].key, ns, keys[i], object_bytes, /*announce=*/true);
    } else {
      ++counters_.write_errors;
      out[i] = s3_->Failure(puts[i]);
    }
  }
  return out;
}

absl::Status ObjectTier::Admit(uint64_t bytes) {
  {
    MutexLock lock(&mu_);
    if (grant_left_ >= bytes) {
      grant_left_ -= bytes;
      return absl::OkStatus();
    }
  }
  std::lock_guard<std::mutex> serial(usage_mu_);
  {
    MutexLock lock(&mu_);  // Another writer may have taken a grant meanwhile.
    if (grant_left_ >= bytes) {
      grant_left_ -= bytes;
      return absl::OkStatus();
    }
  }
  const uint64_t limit = options_.capacity_bytes;
  const uint64_t want = std::max<uint64_t>(bytes, std::min<uint64_t>(limit / 100, 256 << 20));
  absl::StatusOr<ObjectUsage::Grant> grant;
  for (uint64_t ask : {want, bytes}) {
    UsageRecord snapshot;
    {
      MutexLock lock(&mu_);
      snapshot = own_;
    }
    grant = usage_.Reserve(snapshot, ask, limit, NowMs());
    if (!grant.ok()) break;
    if (grant->granted) {
      MutexLock lock(&mu_);
      own_.held += ask;
      grant_left_ += ask - bytes;
      used_ = grant->used;
      return absl::OkStatus();
    }
    if (ask == bytes) break;
  }
  {
    MutexLock lock(&mu_);
    ++counters_.refused_writes;
    if (grant.ok()) used_ = grant->used;
  }
  if (!grant.ok()) return grant.status();
  wake_.notify_all();  // The trimmer may be this daemon.
  return absl::UnavailableError(absl::StrCat(options_.name, " is full: the bucket holds ",
                                             grant->used, " of ", limit, " bytes"));
}

void ObjectTier::EndWrite(uint64_t bytes, bool written) {
  MutexLock lock(&mu_);
  if (written) {
    own_.held -= std::min(own_.held, bytes);
    own_.written += bytes;
  } else {
    grant_left_ += bytes;  // back to this daemon's grant
  }
}

bool ObjectTier::RemoveImpl(const TierNamespace& ns, absl::string_view key) {
  if (!ProbeImpl(ns, key)) return false;
  const std::string name = ObjectName(ns, key);
  uint64_t bytes = 0;
  {
    MutexLock lock(&mu_);
    auto it = index_.find(name);
    if (it != index_.end()) bytes = it->second.bytes;
  }
  return DeleteObjects({{name, bytes}}, RemovalCause::kAdminEvict) == 1;
}

size_t ObjectTier::ClearImpl(std::optional<absl::string_view> fingerprint) {
  const std::string prefix =
      absl::StrCat(options_.prefix, "/", fingerprint.has_value() ? *fingerprint : "",
                   fingerprint.has_value() ? "/" : "");
  absl::StatusOr<std::vector<S3Object>> listed = s3_->List(prefix);
  if (!listed.ok()) {
    spdlog::warn("{}: clear: {}", options_.name, listed.status().ToString());
    return 0;
  }
  std::vector<std::pair<std::string, uint64_t>> doomed;
  for (const S3Object& o : *listed) {
    if (absl::EndsWith(o.key, kBlockFileSuffix)) doomed.emplace_back(o.key, o.size);
  }
  const size_t deleted = DeleteObjects(doomed, RemovalCause::kCleared);
  if (journal_ != nullptr) (void)journal_->Flush(clock_->Now());  // The others learn at once.
  return deleted;
}

TierStats ObjectTier::StatsImpl() const {
  MutexLock lock(&mu_);
  TierStats s = counters_;
  s.used_bytes = used_;
  s.blocks = index_.size();
  return s;
}

}  // namespace kvstrata
