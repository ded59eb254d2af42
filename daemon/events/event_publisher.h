// EventPublisher: turns block appear/leave notices into vLLM-schema KV event batches and
// publishes them the way vLLM's ZmqEventPublisher does, for llm-d's KV-Cache Indexer:
//   PUB socket, 3 frames per message: topic "kv@<pod_id>@<model>", the batch's sequence
//   number (8 bytes, big-endian), the msgpack payload (event_encoder.h);
//   ROUTER replay socket: a request [identity, "", start_seq (8 bytes BE)] is answered
//   with [identity, "", topic, seq, payload] for every kept batch with seq >= start_seq,
//   then [identity, "", "", -1 (8 bytes BE), ""] (vLLM 0.26+'s replay frames).
// One sequence counter for all topics. Push() never blocks: it appends to a bounded queue
// (overflow drops the notice and counts it); one publisher thread drains the queue every
// flush_interval, merges consecutive notices of one kind/namespace/tier into one event,
// labels it with the tier's medium and locality (the tier table's, options.tiers),
// resolves namespaces to model and block size, encodes, sends and logs the batches.
// Endpoints bind when they contain "*", "::", "ipc://" or "inproc://", else connect (as
// vLLM does). Thread-safe.
#ifndef KVSTRATA_DAEMON_EVENTS_EVENT_PUBLISHER_H_
#define KVSTRATA_DAEMON_EVENTS_EVENT_PUBLISHER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/common/mutex.h"
#include "daemon/common/tier_table.h"
#include "daemon/events/event_encoder.h"
#include "daemon/events/event_log.h"
#include "daemon/events/kv_event.h"
#include "daemon/index/block_key.h"

namespace kvstrata {

struct EventPublisherOptions {
  std::string endpoint;         // ZMQ PUB endpoint; "" publishes nothing over ZMQ
  std::string replay_endpoint;  // ZMQ ROUTER endpoint; "" = no replay socket
  std::string pod_id;           // the <id> of the topic, e.g. "node:<node name>" (node-wide)
  EventEncoding encoding = EventEncoding::kMap;
  int64_t data_parallel_rank = 0;
  size_t buffer_batches = 10000;     // kept for replay and PollEvents
  size_t max_queue_events = 100000;  // pending notices before drops
  int send_hwm = 100000;             // ZMQ send high-water mark
  absl::Duration flush_interval = absl::Milliseconds(10);
  size_t max_hashes_per_event = 1024;
  // Each tier's medium and locality, by its id: the daemon's tier table.
  TierTable tiers = TierTable::Standard();
};

// One block appearing in or leaving a tier (or, with kAllBlocksCleared, everything gone).
struct PendingEvent {
  KvEventKind kind = KvEventKind::kBlockStored;
  NamespaceId ns = 0;
  Tier tier = Tier::kL1;
  uint64_t hash = 0;  // ExternalBlockHash
};

struct NamespaceFacts {
  std::string model;
  uint32_t block_size = 0;  // tokens per block
};
// Called on the publisher thread only; nullopt for an unknown namespace.
using NamespaceResolver = std::function<std::optional<NamespaceFacts>(NamespaceId)>;

struct EventPublisherStats {
  uint64_t dropped_events = 0;  // notices lost to a full queue
  uint64_t published_batches = 0;
  uint64_t published_events = 0;
  uint64_t replay_requests = 0;
  uint64_t queued = 0;
};

class EventPublisher {
 public:
  // INVALID_ARGUMENT when an endpoint cannot be bound or connected (the message names it).
  static absl::StatusOr<std::unique_ptr<EventPublisher>> Start(EventPublisherOptions options,
                                                               NamespaceResolver resolver);
  ~EventPublisher();

  // Publishes what is queued, then stops the thread (at once, or within one flush_interval
  // with a replay socket) and closes the sockets. Idempotent.
  void Stop();

  // Never blocks. False when the queue is full (the notice is dropped and counted).
  bool Push(const PendingEvent& event);

  EventPage Read(uint64_t from_seq, size_t max_batches, uint32_t namespace_id) const {
    return log_.Read(from_seq, max_batches, namespace_id);
  }
  EventPublisherStats Stats() const;
  // "kv@<pod_id>@<model>"; an '@' inside the model becomes '_'.
  std::string Topic(const std::string& model) const;

 private:
  struct Sockets;
  EventPublisher(EventPublisherOptions options, NamespaceResolver resolver,
                 std::unique_ptr<Sockets> sockets);
  void Run();
  void PublishPending();
  void Publish(KvEventBatch batch);
  void ServiceReplay();
  const NamespaceFacts& Facts(NamespaceId ns);

  const EventPublisherOptions options_;
  const NamespaceResolver resolver_;
  std::unique_ptr<Sockets> sockets_;  // used by the publisher thread only
  EventLog log_;

  mutable Mutex mu_;
  std::vector<PendingEvent> queue_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> dropped_{0}, batches_{0}, events_{0}, replays_{0};
  std::atomic<bool> stop_{false};
  std::mutex wake_mu_;  // with wake_: the publisher thread's sleep when there is no router
  std::condition_variable wake_;
  std::thread thread_;
  // Publisher-thread state.
  absl::flat_hash_map<NamespaceId, NamespaceFacts> facts_;
  std::vector<std::string> models_seen_;  // topics that AllBlocksCleared goes to
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVENTS_EVENT_PUBLISHER_H_
