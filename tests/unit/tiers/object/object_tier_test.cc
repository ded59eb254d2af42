// The object tier against a real S3 server (SeaweedFS): several tiers on one bucket prefix
// stand for several nodes' daemons. Sharing, the cap across writers, a stale index after
// another daemon's removal, corrupt and foreign objects, the server down and back, and bad
// credentials or keys at start.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/object/object_tier.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/object/object_tier_factory.h"
#include "tests/unit/tiers/tier_test_data.h"

namespace kvstrata {
namespace {

constexpr uint64_t kBlock = 64 << 10;

class ObjectTierTest : public ::testing::Test {
 public:
  void SetUp() override {
    KVSTRATA_SKIP_OR_FAIL_WITHOUT_S3(S3TestServer::Shared());
    prefix_ = FreshObjectPrefix();
    NamespaceSpec spec = OpaqueTestSpec(kBlock, "object-test");
    ns_ = TierNamespace{Fingerprint(spec), spec, kBlock};
  }
  std::unique_ptr<BlockTier> Tier(const std::string& extra = "") {
    auto made = MakeObjectTestTier(prefix_, extra);
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? *std::move(made) : nullptr;
  }
  static std::string Key(int i) { return absl::StrCat("key-", i); }
  bool ReadsBack(BlockTier& tier, int i) {
    std::string out(kBlock, '\0');
    return tier.Read(ns_, Key(i), absl::MakeSpan(out)) && out == Payload(kBlock, i);
  }
  std::unique_ptr<S3Client> Raw() { return *S3Client::Create(S3TestServer::Shared().Client()); }
  // The bytes of the block objects under the prefix (what the bucket holds).
  uint64_t BucketBytes() {
    auto listed = Raw()->List(prefix_ + "/");
    uint64_t sum = 0;
    if (listed.ok()) {
      for (const S3Object& o : *listed) {
        if (absl::EndsWith(o.key, ".kv")) sum += o.size;
      }
    }
    return sum;
  }

  std::string prefix_;
  TierNamespace ns_;
};

TEST_F(ObjectTierTest, AnotherDaemonsThousandBlocksAreFoundOnTheFirstLookup) {
  auto a = Tier("capacity = \"1GiB\"\n"), b = Tier("capacity = \"1GiB\"\n");
  std::vector<std::string> keys, payloads;
  for (int i = 0; i < 1000; ++i) keys.push_back(Key(i)), payloads.push_back(Payload(kBlock, i));
  std::vector<absl::string_view> k(keys.begin(), keys.end()), p(payloads.begin(), payloads.end());
  auto written = a->WriteMany(ns_, k, p);
  ASSERT_TRUE(written.ok());
  for (const absl::Status& s : *written) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(b->Cached(ns_, Key(0)), BlockTier::Presence::kUnknown);  // B never saw them
  auto found = b->ProbeMany(ns_, k);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(std::count(found->begin(), found->end(), true), 1000);
  std::vector<std::string> out(1000, std::string(kBlock, '\0'));
  std::vector<absl::Span<char>> dests;
  for (std::string& o : out) dests.push_back(absl::MakeSpan(o));
  auto read = b->ReadMany(ns_, k, dests);
  ASSERT_TRUE(read.ok());
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE((*read)[i]) << i;
    ASSERT_EQ(out[i], payloads[i]) << i;
  }
}

ObjectTier& AsObject(BlockTier& tier) { return static_cast<ObjectTier&>(tier); }

// Another daemon's blocks are known from its journal before a lookup asks: no request per
// block, whether this daemon opened after them (Open reads the recent journals) or before
// (its follower reads them).
// The followers run only when the test says (Open, Follow): their threads wait an hour.
constexpr char kFollowByHand[] = "follow_interval_ms = 3600000\n";

TEST_F(ObjectTierTest, AnotherDaemonsJournalNamesItsBlocksBeforeAnyLookup) {
  // Every daemon of the bucket gets room for the 1,000 blocks (62.5 MiB): at the default
  // capacity (64 MiB) the trimming daemon may trim them first on a slow run (TSan did).
  const std::string room = absl::StrCat("capacity = \"1GiB\"\n", kFollowByHand);
  auto a = Tier(room), early = Tier(room);
  std::vector<std::string> keys, payloads;
  for (int i = 0; i < 1000; ++i) keys.push_back(Key(i)), payloads.push_back(Payload(kBlock, i));
  std::vector<absl::string_view> k(keys.begin(), keys.end()), p(payloads.begin(), payloads.end());
  ASSERT_TRUE(a->WriteMany(ns_, k, p).ok());
  AsObject(*a).Follow(absl::Seconds(5));  // A's journal goes out
  auto late = Tier(room);                 // reads it at Open
  EXPECT_EQ(AsObject(*early).Follow(absl::Seconds(5)), 1000u);
  for (BlockTier* b : {early.get(), late.get()}) {
    const TierStats before = b->Stats();
    for (int i = 0; i < 1000; ++i) {
      ASSERT_EQ(b->Cached(ns_, Key(i)), BlockTier::Presence::kStale) << i;  // known, not seen
    }
    EXPECT_EQ(before.blocks, 1000u);
    for (int i = 0; i < 1000; i += 97) EXPECT_TRUE(ReadsBack(*b, i)) << i;
  }
  EXPECT_EQ(AsObject(*a).Follow(absl::Seconds(5)), 0u);  // a daemon skips its own journal
}

// A removal another daemon journals takes the block out of this daemon's index; before this
// daemon learns of it, a read is a miss (never wrong bytes).
TEST_F(ObjectTierTest, ARemovalInAnotherDaemonsJournalLeavesTheIndex) {
  auto a = Tier(kFollowByHand), b = Tier(kFollowByHand);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(a->Write(ns_, Key(i), Payload(kBlock, i)).ok());
  AsObject(*a).Follow(absl::Seconds(5));
  EXPECT_EQ(AsObject(*b).Follow(absl::Seconds(5)), 20u);
  EXPECT_EQ(b->Cached(ns_, Key(0)), BlockTier::Presence::kStale);
  EXPECT_TRUE(a->Remove(ns_, Key(0)));     // journals the removal at the next flush
  EXPECT_EQ(a->Clear(std::nullopt), 19u);  // flushes at once
  std::string out(kBlock, '\0');
  EXPECT_FALSE(b->Read(ns_, Key(1), absl::MakeSpan(out)));  // stale: a miss, no wrong bytes
  EXPECT_EQ(AsObject(*b).Follow(absl::Seconds(5)), 20u);
  for (int i = 0; i < 20; ++i) {
    const BlockTier::Presence p = b->Cached(ns_, Key(i));
    EXPECT_TRUE(p == BlockTier::Presence::kAbsent || p == BlockTier::Presence::kUnknown) << i;
  }
  EXPECT_EQ(b->Stats().blocks, 0u);
}

// A daemon that stops refreshing its usage record (killed) has its claim dropped after
// claim_expiry_ms, not a fixed minute.
TEST_F(ObjectTierTest, ADeadDaemonsClaimExpiresAfterTheConfiguredTime) {
  auto b = Tier("claim_expiry_ms = 2000\neviction_interval_ms = 200\n");
  UsageRecord dead;
  dead.held = 3 << 20;
  dead.unix_ms = absl::ToUnixMillis(absl::Now());
  S3Request put;
  put.method = S3Request::Method::kPut;
  put.key = prefix_ + "/.kvstrata/usage/0-dead-holder";  // sorts first: it was the trimmer
  const std::string text = FormatUsageRecord(dead);
  put.body = {text};
  Raw()->Run(put);
  ASSERT_TRUE(put.ok());
  AsObject(*b).RunRound(false);
  EXPECT_GE(b->Stats().used_bytes, 3u << 20);  // live: its claim counts
  const absl::Time t0 = absl::Now();
  uint64_t used = b->Stats().used_bytes;
  while (used >= (3u << 20) && absl::Now() - t0 < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(100));
    used = b->Stats().used_bytes;
  }
  EXPECT_LT(used, 3u << 20) << "still counted after " << absl::Now() - t0;
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(1500));  // not before the expiry
  EXPECT_LE(absl::Now() - t0, absl::Seconds(4));
}

// Writers on several daemons never take the bucket past its capacity (sampled all along),
// and the trimming daemon brings it under the high mark.
void CapHeld(ObjectTierTest* t, int writers) {
  const std::string extra = "capacity = \"4MiB\"\neviction_interval_ms = 200\n";
  std::vector<std::unique_ptr<BlockTier>> tiers;
  for (int w = 0; w < writers; ++w) tiers.push_back(t->Tier(extra));
  const uint64_t cap = 4 << 20;
  std::atomic<bool> done{false};
  uint64_t peak = 0;
  int samples = 0;
  std::thread sampler([&] {
    while (!done.load()) {
      peak = std::max(peak, t->BucketBytes());
      ++samples;
    }
  });
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 300; ++i) {
        (void)tiers[w]->Write(t->ns_, ObjectTierTest::Key(w * 1000 + i),
                              Payload(kBlock, w * 1000 + i));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  absl::SleepFor(absl::Seconds(1));  // a trim round
  done = true;
  sampler.join();
  EXPECT_GT(samples, 5);
  EXPECT_LE(peak, cap * 11 / 10) << writers << " writers";
  EXPECT_LE(t->BucketBytes(), cap);
  uint64_t written = 0;
  for (auto& tier : tiers) written += tier->Stats().writes;
  EXPECT_GT(written * BlockFileBytes(kBlock), cap);  // the cap was reached: trims made room
  std::cout << writers << " writers: peak " << peak << " of " << cap << " bytes, " << samples
            << " samples, " << written << " blocks written\n";
}

TEST_F(ObjectTierTest, CapHeldWithTwoWriters) { CapHeld(this, 2); }
TEST_F(ObjectTierTest, CapHeldWithFourWriters) { CapHeld(this, 4); }

TEST_F(ObjectTierTest, AStaleIndexAfterAnotherDaemonsRemovalMissesNeverWrongBytes) {
  // A does not follow the journals: it does not learn of B's removals before its reads.
  auto a = Tier("presence_ttl_ms = 0\nfollow_interval_ms = 0\n"), b = Tier();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(a->Write(ns_, Key(i), Payload(kBlock, i)).ok());
  EXPECT_EQ(b->Clear(std::nullopt), 20u);                          // another daemon's trim / clear
  EXPECT_EQ(a->Cached(ns_, Key(0)), BlockTier::Presence::kStale);  // A's index still has it
  std::string out(kBlock, '\0');
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(a->Read(ns_, Key(i), absl::MakeSpan(out))) << i;
  EXPECT_EQ(a->Cached(ns_, Key(0)), BlockTier::Presence::kAbsent);
  EXPECT_EQ(a->Stats().blocks, 0u);
}

TEST_F(ObjectTierTest, CorruptAndForeignObjectsAreMissesAndGo) {
  auto a = Tier();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(a->Write(ns_, Key(i), Payload(kBlock, i)).ok());
  auto raw = Raw();
  auto put = [&](int i, std::string body) {
    S3Request r;
    r.method = S3Request::Method::kPut;
    r.key = *BlockFilePath(prefix_, ns_.fingerprint, Key(i));
    r.body = {body};
    raw->Run(r);
    ASSERT_TRUE(r.ok());
  };
  // 0: a flipped payload byte; 1: another key's block under this name; 2: garbage; 3: short.
  std::string flipped =
      EncodeBlockHeader(*MakeBlockHeader(ns_.fingerprint, Key(0), Payload(kBlock, 0), 1)) +
      Payload(kBlock, 0);
  flipped[kBlockHeaderBytes + 100] ^= 1;
  put(0, flipped);
  put(1, EncodeBlockHeader(*MakeBlockHeader(ns_.fingerprint, Key(9), Payload(kBlock, 1), 1)) +
             Payload(kBlock, 1));
  put(2, std::string(kBlockHeaderBytes + kBlock, 'x'));
  put(3, "short");
  auto fresh = Tier();  // a daemon that did not write them (nothing cached)
  for (int i = 0; i < 4; ++i) {
    std::string out(kBlock, '\0');
    EXPECT_FALSE(fresh->Read(ns_, Key(i), absl::MakeSpan(out))) << i;
  }
  EXPECT_EQ(fresh->Stats().quarantined, 4u);
  EXPECT_EQ(BucketBytes(), 0u);  // each deleted
}

TEST_F(ObjectTierTest, BadCredentialsAreAClearErrorAtOpen) {
  auto made = MakeObjectTestTier(prefix_, "", "not-the-secret-SECRETX");
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kUnauthenticated) << made.status();
  EXPECT_TRUE(absl::StrContains(made.status().message(), "SignatureDoesNotMatch")) << made.status();
  EXPECT_FALSE(absl::StrContains(made.status().message(), "SECRETX"));
}

TEST_F(ObjectTierTest, BadKeysOfTheKindAreInvalidArgumentNamingThem) {
  for (const auto& [extra, key] : std::vector<std::pair<std::string, std::string>>{
           {"max_in_flight = 0\n", "obj.max_in_flight"},
           {"addressing = \"dns\"\n", "obj.addressing"},
           {"ca_file = \"relative.pem\"\n", "obj.ca_file"},
           {"eviction_interval_ms = 1\n", "obj.eviction_interval_ms"},
           {"follow_interval_ms = -1\n", "obj.follow_interval_ms"},
           {"claim_expiry_ms = 10\n", "obj.claim_expiry_ms"},
           {"claim_expiry_ms = \"1m\"\n", "obj.claim_expiry_ms"},
           {"claim_expiry_ms = 3000\neviction_interval_ms = 2000\n", "obj.claim_expiry_ms"}}) {
    auto made = MakeObjectTestTier(prefix_, extra);
    ASSERT_FALSE(made.ok()) << extra;
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << made.status();
    EXPECT_TRUE(absl::StrContains(made.status().message(), key)) << made.status();
  }
  auto up = MakeObjectTestTier("bad prefix");
  EXPECT_EQ(up.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(up.status().message(), "obj.prefix")) << up.status();
  auto no_bucket = MakeObjectTestTier(prefix_, "bucket = \"no-such-bucket-kvs\"\n");
  EXPECT_FALSE(no_bucket.ok());
}

// The server never outlives its test process: a process that starts one and is SIGKILLed
// (as a crash or a ctest timeout would end it) takes the server with it.
TEST_F(ObjectTierTest, TheServerDiesWithItsTestProcess) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    S3TestServer server;
    const pid_t weed = server.available() ? server.pid() : -1;
    (void)!::write(fds[1], &weed, sizeof(weed));
    ::raise(SIGKILL);
  }
  ::close(fds[1]);
  pid_t weed = -1;
  ASSERT_EQ(::read(fds[0], &weed, sizeof(weed)), static_cast<ssize_t>(sizeof(weed)));
  ::close(fds[0]);
  ::waitpid(child, nullptr, 0);
  ASSERT_GT(weed, 0) << "the child's server did not start";
  // Gone, or a zombie waiting for init to reap it.
  auto alive = [weed] {
    std::ifstream stat(absl::StrCat("/proc/", weed, "/stat"));
    std::string pid, comm, state;
    return stat >> pid >> comm >> state && state != "Z";
  };
  for (int i = 0; i < 100 && alive(); ++i) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(alive()) << "SeaweedFS " << weed << " outlived its test process";
}

// On a server of its own (the shared one stays up for the other tests, whatever happens here).
TEST_F(ObjectTierTest, TheServerDownAndBackMissesThenHitsAgain) {
  S3TestServer own;
  KVSTRATA_SKIP_OR_FAIL_WITHOUT_S3(own);
  auto made = MakeObjectTestTier(prefix_, "presence_ttl_ms = 0\nrequest_timeout_ms = 2000\n",
                                 S3TestServer::kSecretKey, {}, own);
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<BlockTier> a = *std::move(made);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(a->Write(ns_, Key(i), Payload(kBlock, i)).ok());
  own.Kill();
  std::string out(kBlock, '\0');
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(a->Read(ns_, Key(i), absl::MakeSpan(out))) << i;
  EXPECT_FALSE(a->Write(ns_, Key(100), Payload(kBlock, 100)).ok() &&
               a->Stats().write_errors == 0);  // refused or failed, counted
  ASSERT_TRUE(own.Restart()) << own.why();
  // Back: its listing answers (Restart waited for that); the blocks read again once its
  // volume server has registered, within seconds.
  int back = 0;
  for (int tries = 0; tries < 100 && back < 10; ++tries) {
    back = 0;
    for (int i = 0; i < 10; ++i) back += ReadsBack(*a, i) ? 1 : 0;
    if (back < 10) absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(back, 10) << a->Stats().read_errors << " read errors";
}

}  // namespace
}  // namespace kvstrata
