// CallbackCollectable: series read at scrape time, one at a time (Add) or as a family whose
// label values come and go (AddFamily), in one family per name.
#include "daemon/metrics/callback_collectable.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kvstrata {
namespace {

using Values = std::vector<std::pair<std::string, double>>;

TEST(CallbackCollectableTest, AFamilysSeriesAreReadAtEachScrape) {
  CallbackCollectable collectable;
  Values values;
  collectable.AddFamily("kvstrata_client_counter_total", "help", prometheus::MetricType::Counter,
                        "name", [&values] { return values; });
  std::vector<prometheus::MetricFamily> families = collectable.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "kvstrata_client_counter_total");
  EXPECT_EQ(families[0].type, prometheus::MetricType::Counter);
  EXPECT_TRUE(families[0].metric.empty());  // no series until a value is answered

  values = {{"plan_async", 3}, {"plan_in_step", 5}};
  families = collectable.Collect();
  ASSERT_EQ(families[0].metric.size(), 2u);
  const prometheus::ClientMetric& second = families[0].metric[1];
  ASSERT_EQ(second.label.size(), 1u);
  EXPECT_EQ(second.label[0].name, "name");
  EXPECT_EQ(second.label[0].value, "plan_in_step");
  EXPECT_EQ(second.counter.value, 5);
}

TEST(CallbackCollectableTest, FixedSeriesAndAFamilyShareTheirName) {
  CallbackCollectable collectable;
  collectable.Add("kvstrata_x", "first help", prometheus::MetricType::Gauge, {{"k", "a"}},
                  [] { return 1.0; });
  collectable.AddFamily("kvstrata_x", "ignored", prometheus::MetricType::Counter, "k", [] {
    return Values{{"b", 2}};
  });
  std::vector<prometheus::MetricFamily> families = collectable.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].help, "first help");
  EXPECT_EQ(families[0].type, prometheus::MetricType::Gauge);
  ASSERT_EQ(families[0].metric.size(), 2u);
  EXPECT_EQ(families[0].metric[0].gauge.value, 1);
  EXPECT_EQ(families[0].metric[1].label[0].value, "b");
  EXPECT_EQ(families[0].metric[1].gauge.value, 2);
}

}  // namespace
}  // namespace kvstrata
