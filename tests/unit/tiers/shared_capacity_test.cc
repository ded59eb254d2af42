// A shared (L3) FileTier's capacity on a real directory: admission through the usage ledger
// (shared_usage.h) whatever the number of writers, the trim under the lock (oldest recorded
// access first, one daemon at a time), the ledger corrected by scans and given back at stop.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "daemon/testing/fake_clock.h"
#include "daemon/tiers/file_tier.h"
#include "daemon/tiers/shared_usage.h"
#include "daemon/tiers/write_journal.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/file_tier_fixture.h"

namespace kvstrata {
namespace {

namespace fs = std::filesystem;

class SharedCapacityTest : public FileTierTest {
 protected:
  // The bytes of block files under the root, as a trimmer or `du` would count them.
  uint64_t DirectoryBytes() {
    uint64_t total = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root_, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const std::string name = it->path().filename().string();
      if (it->is_regular_file(ec) && name.size() > 3 && name.ends_with(".kv")) {
        total += it->file_size(ec);
      }
    }
    return total;
  }
  // An empty ledger, scanned just now: a new tier's loop then does not scan at start (its
  // scan would race with the test's first writes; see SharedUsage::Reconcile).
  void FreshLedger() {
    std::ofstream(root_ + "/.kvstrata-usage", std::ios::trunc)
        << FormatUsageLedger({0, absl::ToUnixMillis(absl::Now()), {}});
  }
  // Takes the eviction lock as a trimming daemon (another node) would; the fd (-1: failed)
  // holds it until closed.
  int HoldEvictLock() {
    const std::string path = root_ + "/.kvstrata-evict.lock";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd >= 0 && flock(fd, LOCK_EX) != 0) {
      ::close(fd);
      fd = -1;
    }
    return fd;
  }
  UsageLedger Ledger() {
    SharedUsage usage(BlockFileSystem::Default(), root_);
    absl::StatusOr<UsageLedger> ledger = usage.Read();
    EXPECT_TRUE(ledger.ok()) << ledger.status();
    return ledger.value_or(UsageLedger{});
  }
};

TEST_F(SharedCapacityTest, AWritePastTheHighMarkTrimsAtOnce) {
  FileTierOptions o = Options(/*shared=*/true);
  o.capacity_bytes = 4 * kFileBytes;
  o.shared_eviction_interval = absl::Hours(1);  // only the writes can wake the trim
  FreshLedger();
  auto a = Open(o);
  std::string data = Payload(kPayload, 12);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(a->Write(ns_, Key(i), data).ok());
  for (int i = 0; i < 200 && a->Stats().evictions == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GT(a->Stats().evictions, 0u);
  // The trim made room (once it has taken its deletions off the ledger, just after them).
  absl::Status later = absl::UnavailableError("not tried");
  for (int i = 0; i < 200 && !later.ok(); ++i) {
    later = a->Write(ns_, Key(4), data);
    if (!later.ok()) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(later.ok()) << later;
}

TEST_F(SharedCapacityTest, AWriteThatDoesNotFitIsRefusedAndCounted) {
  FileTierOptions o = Options(/*shared=*/true);
  o.capacity_bytes = 3 * kFileBytes;
  o.shared_eviction_interval = absl::Hours(1);
  FreshLedger();
  auto a = Open(o);
  auto b = Open(o);
  // Hold the eviction lock the way a trimming daemon would: nobody makes room meanwhile.
  const int fd = HoldEvictLock();
  ASSERT_GE(fd, 0);
  std::string data = Payload(kPayload, 13);
  ASSERT_TRUE(a->Write(ns_, Key(0), data).ok());
  ASSERT_TRUE(b->Write(ns_, Key(1), data).ok());
  ASSERT_TRUE(a->Write(ns_, Key(2), data).ok());
  absl::Status refused = b->Write(ns_, Key(3), data);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("usage ledger"), std::string::npos) << refused;
  EXPECT_EQ(b->Stats().refused_writes, 1u);
  EXPECT_FALSE(fs::exists(PathOf(Key(3))));
  EXPECT_EQ(DirectoryBytes(), 3 * kFileBytes);
  EXPECT_EQ(Ledger().bytes, 3 * kFileBytes);
  ::close(fd);
  a->EnforceSharedCapacity();  // (or a daemon's own trim, which the refusal asked for)
  absl::Status later = refused;
  for (int i = 0; i < 500 && !later.ok(); ++i) {
    later = b->Write(ns_, Key(3), data);
    if (!later.ok()) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(later.ok()) << later;
  EXPECT_GT(a->Stats().evictions + b->Stats().evictions, 0u);
}

TEST_F(SharedCapacityTest, ManyWritersNeverPassTheCapacity) {
  FileTierOptions o = Options(/*shared=*/true);
  o.capacity_bytes = 20 * kFileBytes;
  o.high_watermark = 0.9;
  o.low_watermark = 0.6;
  o.shared_eviction_interval = absl::Milliseconds(20);
  constexpr int kTiers = 4, kBlocksEach = 60;
  std::vector<std::unique_ptr<FileTier>> tiers;
  for (int i = 0; i < kTiers; ++i) tiers.push_back(Open(o));
  std::atomic<bool> done{false};
  uint64_t peak = 0;
  std::thread sampler([&] {
    while (!done) {
      peak = std::max(peak, DirectoryBytes());
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  std::atomic<int> written{0}, refused{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kTiers; ++t) {
    writers.emplace_back([&, t] {
      std::string data = Payload(kPayload, 100 + t);
      for (int i = 0; i < kBlocksEach; ++i) {
        absl::Status s = tiers[t]->Write(ns_, Key(t * 1000 + i), data);
        (s.ok() ? written : refused).fetch_add(1);
        absl::SleepFor(absl::Microseconds(200));
      }
    });
  }
  for (std::thread& w : writers) w.join();
  done = true;
  sampler.join();
  // Without the ledger: 2x the capacity and more. A correcting scan (each daemon's first
  // round here: the ledger was never scanned) that races a write has been seen to leave the
  // directory one file over, once in many CI runs (258,048 of 245,760 bytes), until the
  // next trim: docs/tiers.md states that bound.
  EXPECT_LE(peak, o.capacity_bytes + kFileBytes);
  EXPECT_EQ(written + refused, kTiers * kBlocksEach);
  EXPECT_GT(written.load(), static_cast<int>(o.capacity_bytes / kFileBytes));  // trims made room
  uint64_t refused_counted = 0;
  for (auto& t : tiers) refused_counted += t->Stats().refused_writes;
  EXPECT_EQ(refused_counted, static_cast<uint64_t>(refused.load()));
  // Once every daemon renewed its line (holding nothing: each grant was one file), a scan
  // makes the ledger the directory again.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(Ledger().holders.size(), 0u);
  // (A daemon's own trim may hold the lock at that moment: try again.)
  for (int i = 0; i < 100 && Ledger().bytes != DirectoryBytes(); ++i) {
    tiers[0]->EnforceSharedCapacity();
    if (Ledger().bytes != DirectoryBytes()) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Ledger().bytes, DirectoryBytes());
}

TEST_F(SharedCapacityTest, StopGivesTheUnusedGrantBack) {
  FileTierOptions o = Options(/*shared=*/true);
  o.capacity_bytes = 1000 * kFileBytes;  // a grant is 1% of it: 10 files
  FreshLedger();
  auto a = Open(o);
  ASSERT_TRUE(a->Write(ns_, Key(0), Payload(kPayload, 14)).ok());
  EXPECT_EQ(Ledger().bytes, 10 * kFileBytes);
  a->Stop();
  EXPECT_EQ(Ledger().bytes, kFileBytes);
}

TEST_F(SharedCapacityTest, AScanCorrectsALedgerThatLies) {
  FileTierOptions o = Options(/*shared=*/true);
  FreshLedger();  // no scan of the tier's own at start: the test's passes are the only ones
  auto a = Open(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->Write(ns_, Key(i), Payload(kPayload, i)).ok());
  // A torn or foreign ledger reads as empty and never scanned; one over the capacity
  // (a daemon died holding a grant) is what the next scan finds.
  for (const std::string& text :
       {std::string("kvstrata-usage 1\nbytes 12"),
        std::string("kvstrata-usage 1\nbytes 999999999999\nscanned 1\n")}) {
    std::ofstream(root_ + "/.kvstrata-usage", std::ios::trunc) << text;
    a->EnforceSharedCapacity();
    EXPECT_EQ(Ledger().bytes, 3 * kFileBytes) << text;
    EXPECT_GT(Ledger().scanned_unix_ms, 1) << text;
  }
}

TEST_F(SharedCapacityTest, WithoutAUsableLedgerWritesGoOnAndTrimsHoldTheCap) {
  // A filesystem where the ledger cannot be used (no flock, no O_DIRECT, a read-only file):
  // writes are admitted without it (logged) and the trims hold the cap after the fact.
  faults_.SetHook([](absl::string_view op, const std::string&) {
    return op == "ledger" ? absl::UnavailableError("flock: Operation not supported")
                          : absl::OkStatus();
  });
  FileTierOptions o = Options(/*shared=*/true);
  o.files = &faults_;
  o.capacity_bytes = 4 * kFileBytes;
  o.shared_eviction_interval = absl::Milliseconds(20);
  auto a = Open(o);
  std::string data = Payload(kPayload, 15);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(a->Write(ns_, Key(i), data).ok()) << i;
  EXPECT_EQ(a->Stats().refused_writes, 0u);
  for (int i = 0; i < 500 && DirectoryBytes() > o.capacity_bytes; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_LE(DirectoryBytes(), o.capacity_bytes);
  EXPECT_GT(a->Stats().evictions, 0u);
  EXPECT_FALSE(fs::exists(root_ + "/.kvstrata-usage"));
}

TEST_F(SharedCapacityTest, TrimDeletesOldestAccessedFirst) {
  FileTierOptions o = Options(/*shared=*/true);
  o.capacity_bytes = 12 * kFileBytes;
  o.high_watermark = 0.9;
  o.low_watermark = 5.5 / 12;
  FreshLedger();
  auto a = Open(o);
  auto b = Open(o);
  // The writes pass the high mark: hold the lock so that the trims they ask for skip.
  const int fd = HoldEvictLock();
  ASSERT_GE(fd, 0);
  std::string data = Payload(kPayload, 10);
  for (int i = 0; i < 12; ++i) {
    FileTier& writer = i % 2 == 0 ? *a : *b;
    ASSERT_TRUE(writer.Write(ns_, Key(i), data).ok());
    // mtime is the recorded access time; space the writes out so their order is clear.
    struct timespec times[2] = {{0, UTIME_OMIT}, {1'000'000 + i, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, PathOf(Key(i)).c_str(), times, 0), 0);
  }
  // A hit recorded by b makes key 0 the newest.
  ASSERT_TRUE(b->Probe(ns_, Key(0)));
  ASSERT_TRUE(ReadBack(*b, Key(0), data));
  absl::SleepFor(absl::Milliseconds(100));  // the trims the writes asked for have skipped
  ::close(fd);
  // a and b stop (their ledger lines, each a write's room, go); a third daemon's first
  // round finds the ledger past the high mark and trims.
  a->Stop();
  b->Stop();
  auto c = Open(o);
  for (int i = 0; i < 500 && c->Stats().used_bytes != 5 * kFileBytes; ++i) {
    absl::SleepFor(absl::Milliseconds(10));  // until the trim took its deletions off the ledger
  }
  EXPECT_EQ(c->Stats().evictions, 7u);  // 12 files -> 5 (under 5.5)
  EXPECT_TRUE(fs::exists(PathOf(Key(0))));
  for (int i = 1; i <= 7; ++i) EXPECT_FALSE(fs::exists(PathOf(Key(i)))) << i;
  for (int i = 8; i < 12; ++i) EXPECT_TRUE(fs::exists(PathOf(Key(i)))) << i;
  EXPECT_EQ(c->Stats().used_bytes, 5 * kFileBytes);
  EXPECT_EQ(Ledger().bytes, 5 * kFileBytes);
  EXPECT_EQ(c->EnforceSharedCapacity(), 0u);  // Under the cap: nothing more.
}

// The trim takes its files from the write journals (write_journal.h), oldest minute first,
// without scanning the tree: the files a minute's bucket names that were not used since go,
// down to the low mark; a file used later is named by that later bucket. The file server's
// clock is the daemons' here (the test sets each mtime to the fake clock's time).
TEST_F(SharedCapacityTest, TheJournalsTrimOldestMinuteFirstWithoutAScan) {
  FakeClock clock(
      absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now() - absl::Hours(24)) / 60 * 60));
  FileTierOptions o = Options(/*shared=*/true);
  o.capacity_bytes = 12 * kFileBytes;
  o.high_watermark = 0.9;
  o.low_watermark = 5.5 / 12;
  o.clock = &clock;
  FreshLedger();
  auto a = Open(o);
  auto b = Open(o);
  const int fd = HoldEvictLock();  // The trims the writes ask for skip.
  ASSERT_GE(fd, 0);
  std::string data = Payload(kPayload, 11);
  auto set_mtime = [&](int i) {
    const int64_t s = absl::ToUnixSeconds(clock.Now());
    struct timespec times[2] = {{0, UTIME_OMIT}, {s, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, PathOf(Key(i)).c_str(), times, 0), 0);
  };
  const absl::Time t0 = clock.Now();
  for (int i = 0; i < 6; ++i) {  // Minute 0: a writes 0..5.
    ASSERT_TRUE(a->Write(ns_, Key(i), data).ok());
    set_mtime(i);
  }
  clock.Advance(absl::Minutes(1));  // Minute 1: b writes 6..11.
  for (int i = 6; i < 12; ++i) {
    ASSERT_TRUE(b->Write(ns_, Key(i), data).ok());
    set_mtime(i);
  }
  clock.Advance(absl::Minutes(2));  // Minute 3: b serves key 0 (its use is recorded).
  ASSERT_TRUE(b->Probe(ns_, Key(0)));
  ASSERT_TRUE(ReadBack(*b, Key(0), data));
  set_mtime(0);
  a->Stop();  // Both flush their journals and give their room back.
  b->Stop();
  ::close(fd);
  clock.Advance(absl::Minutes(3));  // Minutes 0, 1 and 3 are closed buckets now.
  const int64_t b0 = WriteJournal::BucketOf(t0);
  const std::string journal = root_ + "/.kvstrata-journal/";
  ASSERT_TRUE(fs::exists(journal + absl::StrFormat("%010d", b0)));

  auto c = Open(o);  // Its first round finds the ledger past the high mark and trims.
  for (int i = 0; i < 500 && c->Stats().evictions < 7; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(c->Stats().evictions, 7u);      // 12 files -> 5 (under 5.5)
  EXPECT_TRUE(fs::exists(PathOf(Key(0))));  // used in minute 3
  for (int i = 1; i <= 7; ++i) EXPECT_FALSE(fs::exists(PathOf(Key(i)))) << i;  // minutes 0, 1
  for (int i = 8; i < 12; ++i) EXPECT_TRUE(fs::exists(PathOf(Key(i)))) << i;
  EXPECT_EQ(c->Stats().scanned_files, 0u);                              // No scan of the tree.
  EXPECT_FALSE(fs::exists(journal + absl::StrFormat("%010d", b0)));     // used up: dropped
  EXPECT_TRUE(fs::exists(journal + absl::StrFormat("%010d", b0 + 1)));  // 10, 11 still named
  for (int i = 0; i < 500 && Ledger().bytes != 5 * kFileBytes; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(Ledger().bytes, 5 * kFileBytes);

  // The audit (a full scan) drops buckets that name no file a trim could take: minute 0's
  // went already; minute 1's still names 8..11 and stays; minute 3's names key 0 and stays.
  // Deleted by hand, 8..11 leave minute 1's bucket spent.
  for (int i = 8; i < 12; ++i) fs::remove(PathOf(Key(i)));
  c->EnforceSharedCapacity();
  EXPECT_FALSE(fs::exists(journal + absl::StrFormat("%010d", b0 + 1)));
  EXPECT_TRUE(fs::exists(journal + absl::StrFormat("%010d", b0 + 3)));
}

TEST_F(SharedCapacityTest, OnlyOneDaemonTrimsAtATime) {
  FileTierOptions o = Options(/*shared=*/true);
  o.capacity_bytes = 2 * kFileBytes;
  FreshLedger();
  auto a = Open(o);
  auto b = Open(o);
  // Hold the eviction lock the way another node's daemon would (before the writes: they
  // wake a's own trim, which must skip too).
  const int fd = HoldEvictLock();
  ASSERT_GE(fd, 0);
  std::string data = Payload(kPayload, 11);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(a->Write(ns_, Key(i), data).ok());
  absl::SleepFor(absl::Milliseconds(100));  // a's trim, woken by its writes, has skipped
  EXPECT_EQ(b->EnforceSharedCapacity(), 0u);
  EXPECT_EQ(a->Stats().evictions, 0u);
  ::close(fd);
  EXPECT_GT(b->EnforceSharedCapacity(), 0u);
}

}  // namespace
}  // namespace kvstrata
