// PrometheusMetrics names tiers by the daemon's tier table (issue 45: tiers as data): every
// tier's series under its label, copy routes l1_to_<label> / <label>_to_l1, and nothing
// recorded for an id the table does not have.
#include "daemon/metrics/prometheus_metrics.h"

#include <gtest/gtest.h>

#include <memory>

namespace kvstrata {
namespace {

TierTable TwoLowerTiers() {
  TierTable table;
  table.Add({TierAt(1), "nvme", "local-file", "STORAGE", "LOCAL", false, true});
  table.Add({TierAt(2), "team", "shared-file", "STORAGE", "REMOTE", true, true});
  return table;
}

double Total(const PrometheusMetrics& m, const char* name, const MetricLabelPairs& match = {}) {
  return m.CounterTotal(name, match);
}

// Metrics of a daemon whose table has two lower tiers (TwoLowerTiers).
class PrometheusMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<PrometheusMetrics>> made =
        PrometheusMetrics::Create("", TwoLowerTiers());
    ASSERT_TRUE(made.ok()) << made.status();
    metrics_ = *std::move(made);
  }

  std::unique_ptr<PrometheusMetrics> metrics_;
};

TEST_F(PrometheusMetricsTest, TiersAreLabelledByTheTable) {
  PrometheusMetrics& m = *metrics_;
  m.RecordStored(TierAt(1), 3);
  m.RecordRemoved(TierAt(2), RemovalCause::kEvicted, 2);
  m.RecordTransfer(TierAt(2), CopyDirection::kUp, 100, absl::Milliseconds(1));
  m.RecordTransfer(TierAt(1), CopyDirection::kDown, 40, absl::Milliseconds(1));
  m.RecordTransfer(Tier::kL1, CopyDirection::kDown, 7, absl::Milliseconds(1));
  LookupSample sample;
  sample.requested_blocks = 4;
  sample.hit_blocks[TierIndex(TierAt(2))] = 4;
  m.RecordLookup(sample);
  EXPECT_EQ(Total(m, "kvstrata_blocks_stored_total", {{"tier", "nvme"}}), 3);
  EXPECT_EQ(Total(m, "kvstrata_blocks_removed_total", {{"tier", "team"}, {"cause", "evicted"}}), 2);
  EXPECT_EQ(Total(m, "kvstrata_transfer_bytes_total", {{"direction", "team_to_l1"}}), 100);
  EXPECT_EQ(Total(m, "kvstrata_transfer_bytes_total", {{"direction", "l1_to_nvme"}}), 40);
  EXPECT_EQ(Total(m, "kvstrata_transfer_bytes_total", {{"direction", "gpu_to_l1"}}), 7);
  EXPECT_EQ(Total(m, "kvstrata_hit_blocks_total", {{"tier", "team"}}), 4);
  // No series of the default labels: this daemon has no l2 or l3.
  EXPECT_EQ(Total(m, "kvstrata_blocks_stored_total", {{"tier", "l2"}}), 0);
}

TEST_F(PrometheusMetricsTest, AnIdTheTableDoesNotHaveIsNotRecorded) {
  PrometheusMetrics& m = *metrics_;
  m.RecordStored(TierAt(5), 1);
  m.RecordRemoved(TierAt(7), RemovalCause::kCleared, 1);
  m.RecordTransfer(TierAt(6), CopyDirection::kUp, 10, absl::Milliseconds(1));
  LookupSample sample;
  sample.hit_blocks[5] = 1;
  m.RecordLookup(sample);
  EXPECT_EQ(Total(m, "kvstrata_blocks_stored_total"), 0);
  EXPECT_EQ(Total(m, "kvstrata_blocks_removed_total"), 0);
  EXPECT_EQ(Total(m, "kvstrata_transfer_bytes_total"), 0);
  EXPECT_EQ(Total(m, "kvstrata_hit_blocks_total"), 0);
}

}  // namespace
}  // namespace kvstrata
