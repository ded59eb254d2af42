#include "daemon/events/event_log.h"

#include <algorithm>

namespace kvstrata {

uint64_t EventLog::Append(LoggedBatch entry) {
  MutexLock lock(&mu_);
  entry.batch.seq = next_seq_++;
  entries_.push_back(std::move(entry));
  while (entries_.size() > capacity_) entries_.pop_front();
  return next_seq_ - 1;
}

EventPage EventLog::Read(uint64_t from_seq, size_t max_batches, uint32_t namespace_id) const {
  MutexLock lock(&mu_);
  EventPage page;
  page.next_seq = std::max(from_seq, entries_.empty() ? next_seq_ : entries_.front().batch.seq);
  // Older than what is kept, or ahead of what was ever published (a restarted daemon).
  page.truncated =
      (!entries_.empty() && from_seq < entries_.front().batch.seq) || from_seq > next_seq_;
  if (entries_.empty() || page.next_seq >= next_seq_) {
    page.next_seq = std::min(page.next_seq, next_seq_);
    return page;
  }
  size_t index = page.next_seq - entries_.front().batch.seq;
  for (; index < entries_.size() && page.batches.size() < max_batches; ++index) {
    const KvEventBatch& batch = entries_[index].batch;
    page.next_seq = batch.seq + 1;
    if (namespace_id == 0) {
      page.batches.push_back(batch);
      continue;
    }
    KvEventBatch filtered{batch.seq, batch.ts, batch.model, {}};
    for (const KvEvent& e : batch.events) {
      if (e.namespace_id == namespace_id || e.kind == KvEventKind::kAllBlocksCleared) {
        filtered.events.push_back(e);
      }
    }
    if (!filtered.events.empty()) page.batches.push_back(std::move(filtered));
  }
  return page;
}

std::vector<PublishedBatch> EventLog::Published(uint64_t from_seq) const {
  MutexLock lock(&mu_);
  std::vector<PublishedBatch> out;
  for (const LoggedBatch& e : entries_) {
    if (e.batch.seq >= from_seq) out.push_back({e.batch.seq, e.topic, e.payload});
  }
  return out;
}

uint64_t EventLog::next_seq() const {
  MutexLock lock(&mu_);
  return next_seq_;
}

}  // namespace kvstrata
