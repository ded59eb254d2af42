// ObjectTier's background round: access records, its usage record's refresh, and the trim
// (when this daemon is the trimmer), with the deletions every removal shares.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/object/object_tier.h"
#include "spdlog/spdlog.h"

namespace kvstrata {

size_t ObjectTier::DeleteObjects(const std::vector<std::pair<std::string, uint64_t>>& objects,
                                 RemovalCause cause) {
  std::vector<S3Request> deletes(objects.size());
  std::vector<S3Request*> batch;
  for (size_t i = 0; i < objects.size(); ++i) {
    deletes[i].method = S3Request::Method::kDelete;
    deletes[i].key = objects[i].first;
    batch.push_back(&deletes[i]);
  }
  s3_->Run(batch);
  size_t deleted = 0;
  std::string fingerprint, key;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < objects.size(); ++i) {
    if (!deletes[i].ok() && !deletes[i].not_found()) continue;
    ++deleted;
    if (journal_ != nullptr && BlockOfName(objects[i].first, &fingerprint, &key)) {
      journal_->RecordRemoval(fingerprint, key);
    }
    own_.deleted += objects[i].second;
    used_ -= std::min(used_, objects[i].second);
    GoneLocked(objects[i].first, cause);
  }
  return deleted;
}

void ObjectTier::Loop() {
  while (!stopping_.load()) {
    RunRound(/*force_audit=*/false);
    std::unique_lock<std::mutex> lock(wake_mu_);
    wake_.wait_for(lock, absl::ToChronoNanoseconds(options_.eviction_interval),
                   [&] { return stopping_.load(); });
  }
}

size_t ObjectTier::RunRound(bool force_audit) {
  // Hits recorded in the objects' LastModified (a copy onto itself), for every daemon's trim.
  std::vector<std::string> touch;
  {
    MutexLock lock(&mu_);
    touch.swap(touch_);
  }
  std::vector<S3Request> copies(touch.size());
  std::vector<S3Request*> batch;
  for (size_t i = 0; i < touch.size(); ++i) {
    copies[i].method = S3Request::Method::kCopySelf;
    copies[i].key = touch[i];
    batch.push_back(&copies[i]);
  }
  s3_->Run(batch);
  return Trim(force_audit);
}

size_t ObjectTier::Trim(bool force_audit) {
  std::lock_guard<std::mutex> serial(usage_mu_);
  UsageRecord own;
  {
    MutexLock lock(&mu_);
    own_.unix_ms = NowMs();
    own = own_;
  }
  if (absl::Status s = usage_.Publish(own); !s.ok()) {
    MutexLock lock(&mu_);
    counters_.state = TierState::kDegraded;
    return 0;
  }
  absl::StatusOr<ObjectUsage::View> view = usage_.Read();
  if (!view.ok()) return 0;
  const int64_t now_ms = NowMs();
  const uint64_t used = view->Used(usage_.holder(), own, now_ms);
  const uint64_t cap = options_.capacity_bytes;
  const auto high = static_cast<uint64_t>(static_cast<double>(cap) * options_.high_watermark);
  const auto low = static_cast<uint64_t>(static_cast<double>(cap) * options_.low_watermark);
  bool audit_due;
  {
    MutexLock lock(&mu_);
    counters_.state = TierState::kOk;
    used_ = used;
    audit_due = force_audit || clock_->Now() - last_audit_ >= options_.audit_interval;
  }
  if (view->Trimmer(usage_.holder(), now_ms) != usage_.holder()) return 0;
  if (used <= high && !audit_due) return 0;
  // The listing: the audit's bytes and the trim's order (least recently used first).
  absl::StatusOr<std::vector<S3Object>> listed = s3_->List(absl::StrCat(options_.prefix, "/"));
  if (!listed.ok()) return 0;
  if (journal_ != nullptr) {  // Journals older than any daemon reads (a dead one's too).
    journal_->DropListedBefore(*listed, clock_->Now() - 2 * options_.followed_presence_ttl);
  }
  std::vector<S3Object> blocks;
  uint64_t listed_bytes = 0;
  for (S3Object& o : *listed) {
    if (!absl::EndsWith(o.key, kBlockFileSuffix)) continue;
    listed_bytes += o.size;
    blocks.push_back(std::move(o));
  }
  if (absl::Status s = usage_.Audit(*view, listed_bytes, now_ms); !s.ok()) {
    spdlog::warn("{}: usage audit: {}", options_.name, s.ToString());
    return 0;
  }
  uint64_t held = 0;
  for (const auto& [id, r] : view->records) {
    if (id != usage_.holder() && view->Live(r, now_ms)) {
      held += r.held;
    }
  }
  uint64_t usage = listed_bytes + held + own.held;
  {
    MutexLock lock(&mu_);
    last_audit_ = clock_->Now();
    used_ = usage;
  }
  if (usage <= high) return 0;
  std::sort(blocks.begin(), blocks.end(),
            [](const S3Object& a, const S3Object& b) { return a.last_modified < b.last_modified; });
  std::vector<std::pair<std::string, uint64_t>> doomed;
  for (const S3Object& o : blocks) {
    if (usage <= low) break;
    doomed.emplace_back(o.key, o.size);
    usage -= std::min(usage, o.size);
  }
  const size_t deleted = DeleteObjects(doomed, RemovalCause::kEvicted);
  {
    MutexLock lock(&mu_);
    counters_.evictions += deleted;
    own_.unix_ms = NowMs();
    own = own_;
  }
  (void)usage_.Publish(own);
  spdlog::info("{}: trimmed {} objects ({} bytes listed, capacity {})", options_.name, deleted,
               listed_bytes, cap);
  return deleted;
}

}  // namespace kvstrata
