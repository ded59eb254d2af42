// EventLog: the last `capacity` published batches with their encoded payloads, for ZMQ
// replay requests and for PollEvents. Sequence numbers are dense and start at 0.
// Thread-safe.
#ifndef KVSTRATA_DAEMON_EVENTS_EVENT_LOG_H_
#define KVSTRATA_DAEMON_EVENTS_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "daemon/common/mutex.h"
#include "daemon/events/kv_event.h"

namespace kvstrata {

struct LoggedBatch {
  KvEventBatch batch;
  std::string topic;
  std::string payload;  // msgpack, as published
};

// One batch's wire frames, for the replay socket.
struct PublishedBatch {
  uint64_t seq = 0;
  std::string topic;
  std::string payload;
};

struct EventPage {
  std::vector<KvEventBatch> batches;  // seq >= from_seq, in order
  uint64_t next_seq = 0;              // ask for this next
  bool truncated = false;             // some batches from from_seq on are gone (or seq restarted)
};

class EventLog {
 public:
  explicit EventLog(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Assigns the next sequence number to `entry.batch` and keeps it.
  uint64_t Append(LoggedBatch entry);
  // Up to `max_batches` batches from `from_seq` on; with `namespace_id` != 0 only that
  // namespace's events (batches left empty are skipped but still advance next_seq).
  EventPage Read(uint64_t from_seq, size_t max_batches, uint32_t namespace_id) const;
  // Every kept batch with seq >= from_seq, in order, as it was published.
  std::vector<PublishedBatch> Published(uint64_t from_seq) const;
  uint64_t next_seq() const;

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  std::deque<LoggedBatch> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVENTS_EVENT_LOG_H_
