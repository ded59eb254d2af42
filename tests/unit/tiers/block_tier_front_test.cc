// BlockTier's front (daemon/tiers/block_tier.h), for every kind (block_tier_factories.h):
// bad arguments are clear errors or misses that reach no kind's Impl, reads and writes are
// counted once (TierStats) and recorded once (MetricsSink::RecordTransfer), and the batch
// calls answer key by key what the single calls would. Then a kind that overrides the batch
// Impls (as a remote store would, to pipeline) keeps the front's checks and counts.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "daemon/testing/recording_metrics_sink.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/block_tier_factories.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

using ::testing::HasSubstr;
using tier_contract::kPayload;

template <typename Factory>
class BlockTierFrontTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVSTRATA_SKIP_UNLESS_AVAILABLE(factory_);
    ns_ = factory_.Namespace("front-a");
    tier().SetMetrics(&sink_);
  }
  void TearDown() override {
    if (!IsSkipped() && !HasFatalFailure()) tier().SetMetrics(nullptr);
  }
  BlockTier& tier() { return factory_.Get(); }
  Tier level() { return tier().level(); }
  std::string Read(const std::string& key) {
    std::string out(kPayload, '\0');
    return tier().Read(ns_, key, absl::MakeSpan(out)) ? out : std::string();
  }

  RecordingMetricsSink sink_;  // outlives the tier (declared first)
  Factory factory_;
  TierNamespace ns_;
};

TYPED_TEST_SUITE(BlockTierFrontTest, tier_contract::BlockTierFactories,
                 tier_contract::BlockTierFactoryNames);

TYPED_TEST(BlockTierFrontTest, BadWritesAreInvalidArgumentAndStoreNothing) {
  BlockTier& tier = this->tier();
  const std::string payload = Payload(kPayload, 1);
  absl::Status empty_key = tier.Write(this->ns_, "", payload);
  EXPECT_TRUE(absl::IsInvalidArgument(empty_key)) << empty_key;
  EXPECT_THAT(std::string(empty_key.message()), HasSubstr("block key must be 1..32 bytes"));
  EXPECT_TRUE(absl::IsInvalidArgument(tier.Write(this->ns_, std::string(33, 'k'), payload)));

  TierNamespace no_fingerprint = this->ns_;
  no_fingerprint.fingerprint.clear();
  absl::Status nameless = tier.Write(no_fingerprint, kKey, payload);
  EXPECT_TRUE(absl::IsInvalidArgument(nameless)) << nameless;
  EXPECT_THAT(std::string(nameless.message()), HasSubstr("no fingerprint"));
  TierNamespace bad_fingerprint = this->ns_;
  bad_fingerprint.fingerprint = "ABCDEF0123456789ABCDEF0123456789";
  EXPECT_TRUE(absl::IsInvalidArgument(tier.Write(bad_fingerprint, kKey, payload)));

  absl::Status short_payload = tier.Write(this->ns_, kKey, Payload(kPayload - 1, 1));
  EXPECT_TRUE(absl::IsInvalidArgument(short_payload)) << short_payload;
  EXPECT_THAT(std::string(short_payload.message()), HasSubstr("a payload of 8191 bytes"));
  TierNamespace sizeless = this->ns_;
  sizeless.payload_bytes = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(tier.Write(sizeless, kKey, "")));

  TierStats stats = tier.Stats();
  EXPECT_EQ(stats.rejected_calls, 6u);
  EXPECT_EQ(stats.blocks, 0u);
  EXPECT_EQ(stats.writes, 0u);
  EXPECT_TRUE(this->sink_.copies().empty());
  EXPECT_EQ(this->Read(kKey), "");
}

TYPED_TEST(BlockTierFrontTest, BadCallsMissWithoutTouchingTheBlock) {
  BlockTier& tier = this->tier();
  const std::string payload = Payload(kPayload, 2);
  ASSERT_TRUE(tier.Write(this->ns_, kKey, payload).ok());
  // A dest of the wrong size never reaches the file (a file tier would otherwise find the
  // block "bad" and quarantine it).
  std::string small(kPayload - 1, '\0'), big(2 * kPayload, '\0');
  EXPECT_FALSE(tier.Read(this->ns_, kKey, absl::MakeSpan(small)));
  EXPECT_FALSE(tier.Read(this->ns_, kKey, absl::MakeSpan(big)));
  std::string dest(kPayload, '\0');
  EXPECT_FALSE(tier.Read(this->ns_, "", absl::MakeSpan(dest)));
  EXPECT_FALSE(tier.Probe(this->ns_, ""));
  EXPECT_EQ(tier.Cached(this->ns_, std::string(33, 'k')), BlockTier::Presence::kAbsent);
  TierNamespace no_fingerprint = this->ns_;
  no_fingerprint.fingerprint.clear();
  EXPECT_FALSE(tier.Remove(no_fingerprint, kKey));
  EXPECT_EQ(tier.Clear(absl::string_view("not-a-fingerprint")), 0u);

  TierStats stats = tier.Stats();
  EXPECT_EQ(stats.rejected_calls, 7u);
  EXPECT_EQ(stats.misses, 0u);  // a refused call is not a miss
  EXPECT_EQ(stats.blocks, 1u);
  EXPECT_EQ(this->Read(kKey), payload);
  EXPECT_EQ(tier.Stats().hits, 1u);
}

TYPED_TEST(BlockTierFrontTest, ReadsAndWritesAreCountedAndRecordedOnce) {
  BlockTier& tier = this->tier();
  ASSERT_TRUE(tier.Write(this->ns_, "a", Payload(kPayload, 1)).ok());
  ASSERT_TRUE(tier.Write(this->ns_, "b", Payload(kPayload, 2)).ok());
  ASSERT_TRUE(tier.Write(this->ns_, "a", Payload(kPayload, 1)).ok());  // present: not stored
  EXPECT_EQ(this->Read("a"), Payload(kPayload, 1));
  EXPECT_EQ(this->Read("b"), Payload(kPayload, 2));
  EXPECT_EQ(this->Read("never-written"), "");

  TierStats stats = tier.Stats();
  EXPECT_EQ(stats.writes, 2u);
  EXPECT_EQ(stats.write_bytes, 2 * kPayload);
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.read_bytes, 2 * kPayload);
  // Every Write that succeeded is a copy down (as the write-down always recorded it), every
  // hit a copy up; a miss is none.
  const Tier level = this->level();
  EXPECT_EQ(this->sink_.Count(level, CopyDirection::kDown), 3u);
  EXPECT_EQ(this->sink_.Bytes(level, CopyDirection::kDown), 3 * kPayload);
  EXPECT_EQ(this->sink_.Count(level, CopyDirection::kUp), 2u);
  EXPECT_EQ(this->sink_.Bytes(level, CopyDirection::kUp), 2 * kPayload);
  EXPECT_EQ(this->sink_.copies().size(), 5u);
}

TYPED_TEST(BlockTierFrontTest, ReadManyAnswersKeyByKey) {
  BlockTier& tier = this->tier();
  ASSERT_TRUE(tier.Write(this->ns_, "a", Payload(kPayload, 1)).ok());
  ASSERT_TRUE(tier.Write(this->ns_, "c", Payload(kPayload, 3)).ok());
  std::vector<std::string> out(3, std::string(kPayload, '\0'));
  std::vector<absl::string_view> keys = {"a", "b", "c"};
  std::vector<absl::Span<char>> dests = {absl::MakeSpan(out[0]), absl::MakeSpan(out[1]),
                                         absl::MakeSpan(out[2])};
  absl::StatusOr<std::vector<bool>> hits = tier.ReadMany(this->ns_, keys, dests);
  ASSERT_TRUE(hits.ok()) << hits.status();
  EXPECT_EQ(*hits, std::vector<bool>({true, false, true}));
  EXPECT_EQ(out[0], Payload(kPayload, 1));
  EXPECT_EQ(out[2], Payload(kPayload, 3));
  TierStats stats = tier.Stats();
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(this->sink_.Count(this->level(), CopyDirection::kUp), 2u);
  EXPECT_EQ(this->sink_.Bytes(this->level(), CopyDirection::kUp), 2 * kPayload);

  absl::StatusOr<std::vector<bool>> none = tier.ReadMany(this->ns_, {}, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TYPED_TEST(BlockTierFrontTest, WriteManyStoresEachKeyAndCountsTheNewOnes) {
  BlockTier& tier = this->tier();
  const std::string x = Payload(kPayload, 10), y = Payload(kPayload, 11), z = Payload(kPayload, 12);
  std::vector<absl::string_view> keys = {"x", "y"};
  std::vector<absl::string_view> payloads = {x, y};
  absl::StatusOr<std::vector<absl::Status>> first = tier.WriteMany(this->ns_, keys, payloads);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 2u);
  EXPECT_TRUE((*first)[0].ok()) << (*first)[0];
  EXPECT_TRUE((*first)[1].ok()) << (*first)[1];
  keys = {"x", "z"};
  payloads = {x, z};
  absl::StatusOr<std::vector<absl::Status>> second = tier.WriteMany(this->ns_, keys, payloads);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)[0].ok() && (*second)[1].ok());
  EXPECT_EQ(this->Read("x"), x);
  EXPECT_EQ(this->Read("y"), y);
  EXPECT_EQ(this->Read("z"), z);
  TierStats stats = tier.Stats();
  EXPECT_EQ(stats.blocks, 3u);
  EXPECT_EQ(stats.writes, 3u);  // "x" the second time was present
  EXPECT_EQ(stats.write_bytes, 3 * kPayload);
  EXPECT_EQ(this->sink_.Count(this->level(), CopyDirection::kDown), 4u);
}

TYPED_TEST(BlockTierFrontTest, ProbeManyAnswersKeyByKey) {
  BlockTier& tier = this->tier();
  ASSERT_TRUE(tier.Write(this->ns_, "p", Payload(kPayload, 1)).ok());
  std::vector<absl::string_view> keys = {"p", "q", "p"};
  absl::StatusOr<std::vector<bool>> present = tier.ProbeMany(this->ns_, keys);
  ASSERT_TRUE(present.ok()) << present.status();
  EXPECT_EQ(*present, std::vector<bool>({true, false, true}));
  EXPECT_EQ(tier.Cached(this->ns_, "p"), BlockTier::Presence::kPresent);
  EXPECT_NE(tier.Cached(this->ns_, "q"), BlockTier::Presence::kPresent);
}

TYPED_TEST(BlockTierFrontTest, ABadBatchIsRefusedWhole) {
  BlockTier& tier = this->tier();
  const std::string payload = Payload(kPayload, 1);
  std::vector<absl::string_view> keys = {"ok", ""};
  std::vector<absl::string_view> payloads = {payload, payload};
  absl::StatusOr<std::vector<absl::Status>> written = tier.WriteMany(this->ns_, keys, payloads);
  ASSERT_TRUE(absl::IsInvalidArgument(written.status())) << written.status();
  EXPECT_THAT(std::string(written.status().message()), HasSubstr("key 1"));

  std::string out(kPayload, '\0'), small(kPayload - 1, '\0');
  std::vector<absl::string_view> two = {"ok", "other"};
  std::vector<absl::Span<char>> one_dest = {absl::MakeSpan(out)};
  EXPECT_TRUE(absl::IsInvalidArgument(tier.ReadMany(this->ns_, two, one_dest).status()));
  std::vector<absl::Span<char>> one_small = {absl::MakeSpan(out), absl::MakeSpan(small)};
  EXPECT_TRUE(absl::IsInvalidArgument(tier.ReadMany(this->ns_, two, one_small).status()));
  const std::string too_long(33, 'k');
  std::vector<absl::string_view> long_key = {"ok", too_long};
  EXPECT_TRUE(absl::IsInvalidArgument(tier.ProbeMany(this->ns_, long_key).status()));

  TierStats stats = tier.Stats();
  EXPECT_EQ(stats.rejected_calls, 4u);
  EXPECT_EQ(stats.blocks, 0u);  // "ok" was not written either
  EXPECT_EQ(stats.hits + stats.misses, 0u);
  EXPECT_TRUE(this->sink_.copies().empty());
}

// A kind that overrides the batch Impls (one call per batch, as a store that pipelines
// would): the front still checks, counts and records per key.
class BatchingTier final : public BlockTier {
 public:
  Tier level() const override { return Tier::kL3; }
  int read_batches = 0, write_batches = 0, probe_batches = 0, single_calls = 0;

 protected:
  Presence CachedImpl(const TierNamespace&, absl::string_view key) const override {
    return blocks_.contains(key) ? Presence::kPresent : Presence::kAbsent;
  }
  bool ProbeImpl(const TierNamespace& ns, absl::string_view key) override {
    ++single_calls;
    return CachedImpl(ns, key) == Presence::kPresent;
  }
  bool ReadImpl(const TierNamespace&, absl::string_view key, absl::Span<char> dest) override {
    ++single_calls;
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return false;
    std::copy(it->second.begin(), it->second.end(), dest.begin());
    return true;
  }
  absl::StatusOr<WriteOutcome> WriteImpl(const TierNamespace&, absl::string_view key,
                                         absl::string_view payload) override {
    ++single_calls;
    return blocks_.try_emplace(key, payload).second ? WriteOutcome::kWritten
                                                    : WriteOutcome::kAlreadyPresent;
  }
  bool RemoveImpl(const TierNamespace&, absl::string_view key) override {
    return blocks_.erase(key) > 0;
  }
  size_t ClearImpl(std::optional<absl::string_view>) override {
    const size_t n = blocks_.size();
    blocks_.clear();
    return n;
  }
  TierStats StatsImpl() const override {
    TierStats s;
    s.blocks = blocks_.size();
    return s;
  }
  std::vector<bool> ReadManyImpl(const TierNamespace&, absl::Span<const absl::string_view> keys,
                                 absl::Span<const absl::Span<char>> dests) override {
    ++read_batches;
    std::vector<bool> hits;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = blocks_.find(keys[i]);
      hits.push_back(it != blocks_.end());
      if (hits.back()) std::copy(it->second.begin(), it->second.end(), dests[i].begin());
    }
    return hits;
  }
  std::vector<absl::StatusOr<WriteOutcome>> WriteManyImpl(
      const TierNamespace&, absl::Span<const absl::string_view> keys,
      absl::Span<const absl::string_view> payloads) override {
    ++write_batches;
    std::vector<absl::StatusOr<WriteOutcome>> out;
    for (size_t i = 0; i < keys.size(); ++i) {
      out.push_back(blocks_.try_emplace(keys[i], payloads[i]).second
                        ? WriteOutcome::kWritten
                        : WriteOutcome::kAlreadyPresent);
    }
    return out;
  }
  std::vector<bool> ProbeManyImpl(const TierNamespace&,
                                  absl::Span<const absl::string_view> keys) override {
    ++probe_batches;
    std::vector<bool> out;
    for (absl::string_view key : keys) out.push_back(blocks_.contains(key));
    return out;
  }

 private:
  absl::flat_hash_map<std::string, std::string> blocks_;  // one thread in this test
};

TEST(BlockTierBatchOverrideTest, TheFrontChecksAndCountsAKindsOwnBatches) {
  BatchingTier tier;
  RecordingMetricsSink sink;
  tier.SetMetrics(&sink);
  const TierNamespace ns = tier_contract::MakeNamespace("batching");
  const std::string a = Payload(kPayload, 1), b = Payload(kPayload, 2);
  std::vector<absl::string_view> keys = {"a", "b"};
  std::vector<absl::string_view> payloads = {a, b};
  ASSERT_TRUE(tier.WriteMany(ns, keys, payloads).ok());
  std::vector<std::string> out(3, std::string(kPayload, '\0'));
  std::vector<absl::string_view> read_keys = {"a", "missing", "b"};
  std::vector<absl::Span<char>> dests = {absl::MakeSpan(out[0]), absl::MakeSpan(out[1]),
                                         absl::MakeSpan(out[2])};
  absl::StatusOr<std::vector<bool>> hits = tier.ReadMany(ns, read_keys, dests);
  ASSERT_TRUE(hits.ok()) << hits.status();
  EXPECT_EQ(*hits, std::vector<bool>({true, false, true}));
  EXPECT_EQ(out[0], a);
  EXPECT_EQ(out[2], b);
  absl::StatusOr<std::vector<bool>> present = tier.ProbeMany(ns, read_keys);
  ASSERT_TRUE(present.ok());
  EXPECT_EQ(*present, std::vector<bool>({true, false, true}));
  // A bad batch reaches none of the kind's calls.
  std::vector<absl::string_view> bad = {"a", ""};
  EXPECT_TRUE(absl::IsInvalidArgument(tier.ProbeMany(ns, bad).status()));

  EXPECT_EQ(tier.write_batches, 1);
  EXPECT_EQ(tier.read_batches, 1);
  EXPECT_EQ(tier.probe_batches, 1);
  EXPECT_EQ(tier.single_calls, 0);
  TierStats stats = tier.Stats();
  EXPECT_EQ(stats.writes, 2u);
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.rejected_calls, 1u);
  EXPECT_EQ(sink.Count(Tier::kL3, CopyDirection::kDown), 2u);
  EXPECT_EQ(sink.Count(Tier::kL3, CopyDirection::kUp), 2u);
  EXPECT_EQ(sink.Bytes(Tier::kL3, CopyDirection::kUp), 2 * kPayload);
}

}  // namespace
}  // namespace kvstrata
