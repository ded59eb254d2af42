// ClientCounters: reports replace a session's last ones, node totals never decrease (ended
// sessions stay in them), and one test per class of bad input (ValidateClientCounters and
// the distinct-name limit), each leaving nothing recorded.
#include "daemon/session/client_counters.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvstrata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

TEST(ClientCountersTest, AReportReplacesTheSessionsLastOne) {
  ClientCounters counters;
  ASSERT_TRUE(counters.Report(1, {{"plan_async", 2}, {"plan_recompute", 0}}).ok());
  ASSERT_TRUE(counters.Report(1, {{"plan_async", 5}, {"plan_recompute", 1}}).ok());
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", 5), Pair("plan_recompute", 1)));
}

TEST(ClientCountersTest, SessionsAddUp) {
  ClientCounters counters;
  ASSERT_TRUE(counters.Report(1, {{"plan_async", 2}}).ok());
  ASSERT_TRUE(counters.Report(2, {{"plan_async", 3}, {"plan_in_step", 4}}).ok());
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", 5), Pair("plan_in_step", 4)));
}

TEST(ClientCountersTest, AnEndedSessionStaysInTheTotals) {
  ClientCounters counters;
  ASSERT_TRUE(counters.Report(1, {{"plan_async", 7}}).ok());
  ASSERT_TRUE(counters.Report(2, {{"plan_async", 1}}).ok());
  counters.OnSessionEnded(1);
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", 8)));
  ASSERT_TRUE(counters.Report(2, {{"plan_async", 4}}).ok());
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", 11)));
  counters.OnSessionEnded(2);
  counters.OnSessionEnded(2);  // twice, or a session that never reported: nothing changes
  counters.OnSessionEnded(3);
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", 11)));
}

TEST(ClientCountersTest, ACounterLeftOutKeepsItsValue) {
  ClientCounters counters;
  ASSERT_TRUE(counters.Report(1, {{"plan_async", 3}, {"plan_partial", 2}}).ok());
  ASSERT_TRUE(counters.Report(1, {{"plan_async", 4}}).ok());
  ASSERT_TRUE(counters.Report(1, {}).ok());
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", 4), Pair("plan_partial", 2)));
  ASSERT_TRUE(counters.Report(1, {{"plan_partial", 3}}).ok());
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", 4), Pair("plan_partial", 3)));
}

TEST(ClientCountersTest, ACounterThatGoesBackwardsIsIgnored) {
  ClientCounters counters;
  ASSERT_TRUE(counters.Report(1, {{"plan_async", 10}, {"plan_in_step", 1}}).ok());
  // plan_async lower than its last value: ignored (kept at 10); plan_in_step is taken.
  ASSERT_TRUE(counters.Report(1, {{"plan_async", 4}, {"plan_in_step", 2}}).ok());
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", 10), Pair("plan_in_step", 2)));
  // Counted again only beyond the larger value.
  ASSERT_TRUE(counters.Report(1, {{"plan_async", 12}}).ok());
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", 12), Pair("plan_in_step", 2)));
}

TEST(ClientCountersTest, TotalsSaturate) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  ClientCounters counters;
  ASSERT_TRUE(counters.Report(1, {{"plan_async", kMax - 1}}).ok());
  ASSERT_TRUE(counters.Report(2, {{"plan_async", 5}}).ok());
  EXPECT_THAT(counters.Totals(), ElementsAre(Pair("plan_async", kMax)));
}

TEST(ValidateClientCountersTest, AcceptsUpToTheLimits) {
  ClientCounterValues report;
  for (size_t i = 0; i < kMaxClientCountersPerReport; ++i) report[absl::StrCat("c_", i)] = i;
  report.erase("c_0");
  report[std::string(kMaxClientCounterNameBytes, 'z')] = 1;
  EXPECT_TRUE(ValidateClientCounters(report).ok());
  EXPECT_TRUE(ValidateClientCounters({}).ok());
  EXPECT_TRUE(ValidateClientCounters({{"plan_in_step", 0}, {"0_9", 1}}).ok());
}

TEST(ValidateClientCountersTest, TooManyEntries) {
  ClientCounterValues report;
  for (size_t i = 0; i <= kMaxClientCountersPerReport; ++i) report[absl::StrCat("c_", i)] = 1;
  absl::Status s = ValidateClientCounters(report);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("33 entries; a heartbeat carries at most 32"));
}

TEST(ValidateClientCountersTest, EmptyName) {
  absl::Status s = ValidateClientCounters({{"", 1}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("a counter name is 1..64 bytes"));
}

TEST(ValidateClientCountersTest, NameTooLong) {
  absl::Status s = ValidateClientCounters({{std::string(kMaxClientCounterNameBytes + 1, 'a'), 1}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is 65 bytes; a counter name is 1..64 bytes"));
}

TEST(ValidateClientCountersTest, NameOutsideTheCharset) {
  for (const std::string& name :
       std::vector<std::string>{"Plan", "plan-async", "plan.async", "plan async", "caf\xc3\xa9",
                                std::string("a\0b", 3)}) {
    absl::Status s = ValidateClientCounters({{name, 1}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(s.message(), HasSubstr("outside [a-z0-9_]")) << name;
  }
}

TEST(ClientCountersTest, TooManyDistinctNamesIsRefusedAndRecordsNothing) {
  ClientCounters counters;
  for (size_t i = 0; i < kMaxClientCounterNames; i += 16) {
    ClientCounterValues report;
    for (size_t j = i; j < i + 16; ++j) report[absl::StrCat("n_", j)] = 1;
    ASSERT_TRUE(counters.Report(i, report).ok());
    counters.OnSessionEnded(i);  // ended sessions' names stay
  }
  // Known names still count; a new one is refused, with the known ones of its report.
  ASSERT_TRUE(counters.Report(999, {{"n_0", 5}}).ok());
  absl::Status s = counters.Report(999, {{"n_1", 9}, {"brand_new", 1}});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("at most 256 distinct counter names"));
  ClientCounterValues totals = counters.Totals();
  EXPECT_EQ(totals.size(), kMaxClientCounterNames);
  EXPECT_EQ(totals["n_0"], 6u);
  EXPECT_EQ(totals["n_1"], 1u);
  EXPECT_FALSE(totals.contains("brand_new"));
  // The session's last report is unchanged: n_1 counts from 0 for it next time.
  ASSERT_TRUE(counters.Report(999, {{"n_1", 2}}).ok());
  EXPECT_EQ(counters.Totals()["n_1"], 3u);
}

TEST(ClientCountersTest, NothingReportedNothingListed) {
  ClientCounters counters;
  EXPECT_THAT(counters.Totals(), IsEmpty());
}

}  // namespace
}  // namespace kvstrata
