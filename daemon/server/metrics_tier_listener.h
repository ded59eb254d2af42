// MetricsTierListener: counts blocks stored in and removed from each tier (evictions
// among them) on a MetricsSink. Quick, lock-free. Thread-safe.
#ifndef KVSTRATA_DAEMON_SERVER_METRICS_TIER_LISTENER_H_
#define KVSTRATA_DAEMON_SERVER_METRICS_TIER_LISTENER_H_

#include "daemon/cache/tier_listener.h"
#include "daemon/metrics/metrics_sink.h"

namespace kvstrata {

class MetricsTierListener : public TierListener {
 public:
  // `sink` is not owned and must outlive the listener's use.
  explicit MetricsTierListener(MetricsSink* sink) : sink_(sink) {}

  void OnStored(NamespaceId, const BlockKey&, Tier tier) override { sink_->RecordStored(tier, 1); }
  void OnRemoved(NamespaceId, const BlockKey&, Tier tier, RemovalCause cause) override {
    sink_->RecordRemoved(tier, cause, 1);
  }

 private:
  MetricsSink* const sink_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_METRICS_TIER_LISTENER_H_
