#include "daemon/events/event_publisher.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace kvstrata {
namespace {

std::string SeqBytes(int64_t seq) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, seq = static_cast<int64_t>(static_cast<uint64_t>(seq) >> 8)) {
    out[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
  }
  return out;
}

bool ShouldBind(const std::string& endpoint) {
  return absl::StrContains(endpoint, "*") || absl::StrContains(endpoint, "::") ||
         absl::StartsWith(endpoint, "ipc://") || absl::StartsWith(endpoint, "inproc://");
}

// Sends `frames` as one multipart message without blocking.
void SendFrames(void* socket, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_send(socket, frames[i].data(), frames[i].size(), flags) < 0) {
      spdlog::debug("events_send_failed error=\"{}\"", zmq_strerror(zmq_errno()));
      return;
    }
  }
}

}  // namespace

struct EventPublisher::Sockets {
  void* context = nullptr;
  void* pub = nullptr;
  void* router = nullptr;

  ~Sockets() {
    if (pub != nullptr) zmq_close(pub);
    if (router != nullptr) zmq_close(router);
    if (context != nullptr) zmq_ctx_term(context);
  }

  absl::Status Open(int type, const std::string& endpoint, int hwm, void** out) {
    void* socket = zmq_socket(context, type);
    if (socket == nullptr) return absl::InternalError(zmq_strerror(zmq_errno()));
    int linger = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(socket, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    bool bind = ShouldBind(endpoint);
    int rc = bind ? zmq_bind(socket, endpoint.c_str()) : zmq_connect(socket, endpoint.c_str());
    if (rc != 0) {
      std::string why = zmq_strerror(zmq_errno());
      zmq_close(socket);
      return absl::InvalidArgumentError(
          absl::StrCat("events: cannot ", bind ? "bind" : "connect", " '", endpoint, "': ", why));
    }
    *out = socket;
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<EventPublisher>> EventPublisher::Start(EventPublisherOptions options,
                                                                      NamespaceResolver resolver) {
  auto sockets = std::make_unique<Sockets>();
  if (!options.endpoint.empty() || !options.replay_endpoint.empty()) {
    sockets->context = zmq_ctx_new();
    if (sockets->context == nullptr) return absl::InternalError("events: zmq_ctx_new failed");
  }
  if (!options.endpoint.empty()) {
    absl::Status s = sockets->Open(ZMQ_PUB, options.endpoint, options.send_hwm, &sockets->pub);
    if (!s.ok()) return s;
  }
  if (!options.replay_endpoint.empty()) {
    absl::Status s =
        sockets->Open(ZMQ_ROUTER, options.replay_endpoint, options.send_hwm, &sockets->router);
    if (!s.ok()) return s;
  }
  std::unique_ptr<EventPublisher> publisher(
      new EventPublisher(std::move(options), std::move(resolver), std::move(sockets)));
  publisher->thread_ = std::thread([p = publisher.get()] { p->Run(); });
  return publisher;
}

EventPublisher::EventPublisher(EventPublisherOptions options, NamespaceResolver resolver,
                               std::unique_ptr<Sockets> sockets)
    : options_(std::move(options)),
      resolver_(std::move(resolver)),
      sockets_(std::move(sockets)),
      log_(options_.buffer_batches) {}

EventPublisher::~EventPublisher() { Stop(); }

void EventPublisher::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    if (stop_.exchange(true)) return;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  sockets_.reset();
}

bool EventPublisher::Push(const PendingEvent& event) {
  MutexLock lock(&mu_);
  if (queue_.size() >= options_.max_queue_events) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  queue_.push_back(event);
  return true;
}

EventPublisherStats EventPublisher::Stats() const {
  EventPublisherStats stats;
  stats.dropped_events = dropped_.load(std::memory_order_relaxed);
  stats.published_batches = batches_.load(std::memory_order_relaxed);
  stats.published_events = events_.load(std::memory_order_relaxed);
  stats.replay_requests = replays_.load(std::memory_order_relaxed);
  MutexLock lock(&mu_);
  stats.queued = queue_.size();
  return stats;
}

std::string EventPublisher::Topic(const std::string& model) const {
  return absl::StrCat("kv@", options_.pod_id, "@", absl::StrReplaceAll(model, {{"@", "_"}}));
}

void EventPublisher::Run() {
  const long timeout_ms = std::max<long>(1, absl::ToInt64Milliseconds(options_.flush_interval));
  while (!stop_.load()) {
    if (sockets_->router != nullptr) {  // Wait for a replay request or the next flush.
      zmq_pollitem_t item{sockets_->router, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, timeout_ms) > 0 && (item.revents & ZMQ_POLLIN) != 0) {
        ServiceReplay();
      }
    } else {
      std::unique_lock<std::mutex> lock(wake_mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return stop_.load(); });
    }
    PublishPending();
  }
  PublishPending();
}

const NamespaceFacts& EventPublisher::Facts(NamespaceId ns) {
  auto it = facts_.find(ns);
  if (it != facts_.end()) return it->second;
  std::optional<NamespaceFacts> found = resolver_ ? resolver_(ns) : std::nullopt;
  if (!found.has_value()) {
    static const NamespaceFacts kUnknown{"", 0};
    return kUnknown;
  }
  return facts_.emplace(ns, std::move(*found)).first->second;
}

void EventPublisher::PublishPending() {
  std::vector<PendingEvent> pending;
  {
    MutexLock lock(&mu_);
    pending.swap(queue_);
  }
  if (pending.empty()) return;
  const double ts = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  std::vector<KvEventBatch> batches;  // one per model, in order of first appearance
  auto batch_for = [&](const std::string& model) -> KvEventBatch& {
    for (KvEventBatch& b : batches) {
      if (b.model == model) return b;
    }
    if (std::find(models_seen_.begin(), models_seen_.end(), model) == models_seen_.end()) {
      models_seen_.push_back(model);
    }
    return batches.emplace_back(KvEventBatch{0, ts, model, {}});
  };
  for (const PendingEvent& p : pending) {
    if (p.kind == KvEventKind::kAllBlocksCleared) {
      for (const std::string& model : std::vector<std::string>(models_seen_)) {
        batch_for(model).events.push_back(KvEvent{.kind = KvEventKind::kAllBlocksCleared});
      }
      continue;
    }
    const NamespaceFacts& facts = Facts(p.ns);
    KvEventBatch& batch = batch_for(facts.model);
    // A tier the table does not have (not expected): a lower tier on this node.
    const bool known = options_.tiers.Has(p.tier);
    const std::string_view medium =
        known ? std::string_view(options_.tiers.Of(p.tier).medium) : std::string_view("STORAGE");
    const std::string_view locality =
        known ? std::string_view(options_.tiers.Of(p.tier).locality) : std::string_view("LOCAL");
    if (!batch.events.empty()) {
      KvEvent& last = batch.events.back();
      if (last.kind == p.kind && last.namespace_id == p.ns && last.medium == medium &&
          last.locality == locality && last.block_hashes.size() < options_.max_hashes_per_event) {
        last.block_hashes.push_back(p.hash);
        continue;
      }
    }
    KvEvent e;
    e.kind = p.kind;
    e.block_hashes.push_back(p.hash);
    e.block_size = facts.block_size;
    e.medium = std::string(medium);
    e.locality = std::string(locality);
    e.namespace_id = p.ns;
    batch.events.push_back(std::move(e));
  }
  for (KvEventBatch& batch : batches) Publish(std::move(batch));
}

void EventPublisher::Publish(KvEventBatch batch) {
  LoggedBatch entry;
  entry.topic = Topic(batch.model);
  size_t events = batch.events.size();
  // The sequence number is assigned by the log; the payload does not contain it.
  entry.payload = EncodeEventBatch(batch, options_.data_parallel_rank, options_.encoding);
  entry.batch = std::move(batch);
  std::string topic = entry.topic, payload = entry.payload;
  uint64_t seq = log_.Append(std::move(entry));
  if (sockets_->pub != nullptr) {
    SendFrames(sockets_->pub, {topic, SeqBytes(static_cast<int64_t>(seq)), payload});
  }
  batches_.fetch_add(1, std::memory_order_relaxed);
  events_.fetch_add(events, std::memory_order_relaxed);
}

void EventPublisher::ServiceReplay() {
  while (true) {
    std::vector<std::string> frames;
    int more = 1;
    while (more != 0) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, sockets_->router, frames.empty() ? ZMQ_DONTWAIT : 0) < 0) {
        zmq_msg_close(&msg);
        return;  // EAGAIN: no (more) requests.
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    replays_.fetch_add(1, std::memory_order_relaxed);
    if (frames.size() != 3 || !frames[1].empty() || frames[2].size() != 8) {
      spdlog::warn("events_bad_replay_request frames={} (want identity, empty, 8-byte seq)",
                   frames.size());
      if (!frames.empty()) SendFrames(sockets_->router, {frames[0], "", "", SeqBytes(-1), ""});
      continue;
    }
    uint64_t start = 0;
    for (char c : frames[2]) start = (start << 8) | static_cast<uint8_t>(c);
    for (const PublishedBatch& b : log_.Published(start)) {
      SendFrames(sockets_->router,
                 {frames[0], "", b.topic, SeqBytes(static_cast<int64_t>(b.seq)), b.payload});
    }
    SendFrames(sockets_->router, {frames[0], "", "", SeqBytes(-1), ""});
  }
}

}  // namespace kvstrata
