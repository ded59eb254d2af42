// FileTier on real directories (and, where the test is about the tier's logic alone, on a
// MemoryFileSystem): index and probes, warm-up after a restart, a local tier's capacity
// (policy eviction), faults (full disk, I/O errors, bad files, slow disks through a
// FaultFileSystem) and concurrent writers of one key. A shared tier's capacity (the usage
// ledger, trimming under the lock): shared_capacity_test.cc.
#include "daemon/tiers/file_tier.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/testing/fake_clock.h"
#include "daemon/testing/fault_file_system.h"
#include "daemon/tiers/block_file_io.h"
#include "daemon/tiers/block_path.h"
#include "gtest/gtest.h"
#include "tests/unit/tiers/file_tier_fixture.h"

namespace kvstrata {
namespace {

namespace fs = std::filesystem;

TEST_F(FileTierTest, WriteThenReadByteExact) {
  auto tier = Open(Options());
  std::string data = Payload(kPayload, 1);
  ASSERT_TRUE(tier->Write(ns_, Key(1), data).ok());
  EXPECT_EQ(tier->Cached(ns_, Key(1)), FileTier::Presence::kPresent);
  EXPECT_TRUE(ReadBack(*tier, Key(1), data));
  EXPECT_TRUE(fs::exists(fs::path(root_) / ns_.fingerprint / "namespace.json"));
  TierStats st = tier->Stats();
  EXPECT_EQ(st.blocks, 1u);
  EXPECT_EQ(st.used_bytes, kFileBytes);
  EXPECT_EQ(st.hits, 1u);
}

TEST_F(FileTierTest, LocalTierKnowsItsAbsentKeysOnceWarm) {
  auto tier = Open(Options());
  EXPECT_EQ(tier->Cached(ns_, Key(9)), FileTier::Presence::kAbsent);
  std::string buf(kPayload, '\0');
  EXPECT_FALSE(tier->Read(ns_, Key(9), absl::MakeSpan(buf)));
  EXPECT_EQ(tier->Stats().misses, 1u);
}

TEST_F(MemoryFileTierTest, RestartFindsEveryFileAndRemovesStaleTempFiles) {
  std::string data = Payload(kPayload, 2);
  {
    auto tier = Open(Options());
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(tier->Write(ns_, Key(i), data).ok());
  }
  std::string stale = PathOf(Key(0)) + ".tmp.999999.00000000deadbeef";
  ASSERT_TRUE(memory_.SetContents(stale, "half a block"));
  auto tier = Open(Options());
  TierStats st = tier->Stats();
  EXPECT_TRUE(st.warm);
  EXPECT_EQ(st.blocks, 50u);
  EXPECT_EQ(st.used_bytes, 50 * kFileBytes);
  EXPECT_FALSE(memory_.Stat(stale).has_value());
  EXPECT_TRUE(ReadBack(*tier, Key(49), data));
}

TEST_F(MemoryFileTierTest, LocalCapacityEvictsLeastRecentlyUsed) {
  FileTierOptions o = Options();
  o.capacity_bytes = 10 * kFileBytes;
  o.high_watermark = 1.0;
  o.low_watermark = 0.8;
  auto tier = Open(o);
  std::string data = Payload(kPayload, 3);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(tier->Write(ns_, Key(i), data).ok());
  ASSERT_TRUE(ReadBack(*tier, Key(0), data));  // Key 0 becomes the most recent.
  ASSERT_TRUE(tier->Write(ns_, Key(10), data).ok());
  TierStats st = tier->Stats();
  EXPECT_LE(st.used_bytes, o.capacity_bytes);
  EXPECT_GE(st.evictions, 2u);
  EXPECT_TRUE(memory_.Stat(PathOf(Key(0))).has_value());
  EXPECT_FALSE(memory_.Stat(PathOf(Key(1))).has_value());
  EXPECT_EQ(tier->Cached(ns_, Key(1)), FileTier::Presence::kAbsent);
}

TEST_F(FileTierTest, FullDiskShrinksTheTier) {
  FileTierOptions o = Options();
  std::atomic<bool> full{false};
  faults_.SetHook([&](absl::string_view op, const std::string&) {
    return op == "write" && full ? absl::ResourceExhaustedError("No space left on device")
                                 : absl::OkStatus();
  });
  o.files = &faults_;
  auto tier = Open(o);
  std::string data = Payload(kPayload, 4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(tier->Write(ns_, Key(i), data).ok());
  full = true;
  EXPECT_TRUE(absl::IsResourceExhausted(tier->Write(ns_, Key(4), data)));
  TierStats st = tier->Stats();
  EXPECT_EQ(st.state, TierState::kDegraded);
  EXPECT_LT(st.effective_bytes, st.capacity_bytes);
  EXPECT_EQ(st.write_errors, 1u);
  full = false;
  // The shrunk tier makes room by evicting instead of hitting the full disk again.
  ASSERT_TRUE(tier->Write(ns_, Key(5), data).ok());
  EXPECT_LE(tier->Stats().used_bytes, st.effective_bytes);
  EXPECT_TRUE(ReadBack(*tier, Key(5), data));
}

TEST_F(FileTierTest, EveryFullDiskShrinksTheTierToWhatItHolds) {
  FileTierOptions o = Options();
  std::atomic<bool> full{false};
  std::atomic<int> writes{0};
  faults_.SetHook([&](absl::string_view op, const std::string&) {
    if (op != "write") return absl::OkStatus();
    ++writes;
    return full ? absl::ResourceExhaustedError("No space left on device") : absl::OkStatus();
  });
  o.files = &faults_;
  auto tier = Open(o);
  std::string data = Payload(kPayload, 6);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(tier->Write(ns_, Key(i), data).ok());
  const uint64_t four = tier->Stats().used_bytes;
  full = true;
  EXPECT_TRUE(absl::IsResourceExhausted(tier->Write(ns_, Key(4), data)));
  EXPECT_EQ(tier->Stats().effective_bytes, four);  // Exactly what it holds: no floor.
  // Something else fills the disk further: the next failure shrinks the tier again.
  ASSERT_TRUE(tier->Remove(ns_, Key(0)));
  ASSERT_TRUE(tier->Remove(ns_, Key(1)));
  const uint64_t two = tier->Stats().used_bytes;
  EXPECT_TRUE(absl::IsResourceExhausted(tier->Write(ns_, Key(5), data)));
  EXPECT_EQ(tier->Stats().effective_bytes, two);
  EXPECT_EQ(tier->Stats().state, TierState::kDegraded);
}

TEST_F(FileTierTest, FullDiskHoldingNothingRefusesWritesWithoutTouchingTheDisk) {
  FileTierOptions o = Options();
  std::atomic<int> writes{0};
  faults_.SetHook([&](absl::string_view op, const std::string&) {
    if (op != "write") return absl::OkStatus();
    ++writes;
    return absl::ResourceExhaustedError("No space left on device");
  });
  o.files = &faults_;
  auto tier = Open(o);
  std::string data = Payload(kPayload, 7);
  EXPECT_TRUE(absl::IsResourceExhausted(tier->Write(ns_, Key(0), data)));
  EXPECT_EQ(writes.load(), 1);
  absl::Status refused = tier->Write(ns_, Key(1), data);
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_EQ(writes.load(), 1);  // Refused before any file was written.
  TierStats st = tier->Stats();
  EXPECT_EQ(st.write_errors, 1u);
  EXPECT_EQ(st.refused_writes, 1u);
  EXPECT_EQ(st.state, TierState::kDegraded);
}

TEST_F(MemoryFileTierTest, ShrunkTierGrowsBackWhenTheDiskHasRoomAgain) {
  FakeClock clock;
  FileTierOptions o = Options();
  o.clock = &clock;
  o.space_recheck_interval = absl::Milliseconds(50);
  memory_.SetCapacity(4096);  // Room for namespace.json, none for a block.
  auto tier = Open(o);
  std::string data = Payload(kPayload, 8);
  // Holding nothing when the disk filled: shrunk to nothing, every write refused.
  EXPECT_TRUE(absl::IsResourceExhausted(tier->Write(ns_, Key(0), data)));
  EXPECT_TRUE(absl::IsUnavailable(tier->Write(ns_, Key(1), data)));
  EXPECT_EQ(tier->Stats().state, TierState::kDegraded);
  // Some space was freed: after the recheck interval the tier grows to 90% of it.
  memory_.SetCapacity(4096 + 10 * kFileBytes);
  clock.Advance(absl::Milliseconds(60));
  ASSERT_TRUE(tier->Write(ns_, Key(2), data).ok());
  TierStats st = tier->Stats();
  EXPECT_EQ(st.state, TierState::kDegraded);
  EXPECT_GE(st.effective_bytes, 9 * kFileBytes);
  EXPECT_LE(st.effective_bytes, 10 * kFileBytes);
  // Plenty: the tier takes writes again at its configured capacity, without a restart.
  memory_.SetCapacity(MemoryFileSystem::kDefaultCapacity);
  clock.Advance(absl::Milliseconds(60));
  for (int i = 3; i < 6; ++i) ASSERT_TRUE(tier->Write(ns_, Key(i), data).ok()) << i;
  st = tier->Stats();
  EXPECT_EQ(st.state, TierState::kOk);
  EXPECT_EQ(st.effective_bytes, st.capacity_bytes);
  EXPECT_TRUE(ReadBack(*tier, Key(5), data));
}

TEST_F(FileTierTest, IoErrorMakesTheTierReadOnlyForACooldown) {
  FileTierOptions o = FailingFirstWrites(1);
  o.read_only_cooldown = absl::Milliseconds(300);
  auto tier = Open(o);
  std::string data = Payload(kPayload, 5);
  EXPECT_FALSE(tier->Write(ns_, Key(1), data).ok());
  EXPECT_EQ(tier->Stats().state, TierState::kReadOnly);
  EXPECT_FALSE(tier->Write(ns_, Key(2), data).ok());  // Refused without touching the disk.
  EXPECT_EQ(tier->Stats().refused_writes, 1u);
  absl::SleepFor(absl::Milliseconds(350));
  EXPECT_TRUE(tier->Write(ns_, Key(3), data).ok());
  EXPECT_EQ(tier->Stats().state, TierState::kOk);
}

// Two daemons creating the same hash directory through two mounts (GlusterFS) can see
// ENOENT / ESTALE past MakeDirectories' retries: that write is dropped, the tier stays
// writable (issue 46: it went read-only for 30 s and dropped ~95 % of both daemons' writes).
TEST_F(FileTierTest, ADirectoryRaceDropsOneWriteAndKeepsTheTierWritable) {
  FileTierOptions o = Options();
  std::atomic<int> races{1};
  faults_.SetHook([&](absl::string_view op, const std::string& path) {
    return op == "write" && races.fetch_sub(1) > 0
               ? absl::AbortedError("directory race: mkdir " + path + ": Stale file handle")
               : absl::OkStatus();
  });
  o.files = &faults_;
  auto tier = Open(o);
  std::string data = Payload(kPayload, 14);
  EXPECT_TRUE(absl::IsAborted(tier->Write(ns_, Key(1), data)));
  EXPECT_EQ(tier->Stats().state, TierState::kOk);
  EXPECT_EQ(tier->Stats().write_errors, 1u);
  ASSERT_TRUE(tier->Write(ns_, Key(2), data).ok());  // No cooldown.
  EXPECT_EQ(tier->Stats().refused_writes, 0u);
  EXPECT_TRUE(ReadBack(*tier, Key(2), data));
}

// The same race at the syscall level: every open in a hash directory answers ESTALE (the
// other node's mount replaced it), then a mkdir keeps answering ESTALE. Each drops that
// write and nothing more; before, an ESTALE from open(2) made the tier read-only for 30 s.
int StaleOpen(const char* path, int flags, mode_t mode) {
  if ((flags & O_CREAT) != 0) {
    errno = ESTALE;
    return -1;
  }
  return ::open(path, flags, mode);
}
int StaleMkdir(const char*, mode_t) {
  errno = ESTALE;
  return -1;
}
int PlainOpen(const char* path, int flags, mode_t mode) { return ::open(path, flags, mode); }
void NoSleep(int) {}

TEST_F(FileTierTest, AStaleHashDirectoryNeverMakesTheTierReadOnly) {
  auto tier = Open(Options());
  std::string data = Payload(kPayload, 15);
  static constexpr internal::DirectoryCalls kStaleOpen = {::mkdir, ::stat, StaleOpen, NoSleep};
  static constexpr internal::DirectoryCalls kStaleMkdir = {StaleMkdir, ::stat, PlainOpen, NoSleep};
  internal::SetDirectoryCallsForTest(&kStaleOpen);
  absl::Status stale_open = tier->Write(ns_, Key(1), data);
  internal::SetDirectoryCallsForTest(&kStaleMkdir);
  absl::Status stale_mkdir = tier->Write(ns_, Key(2), data);
  internal::SetDirectoryCallsForTest(nullptr);
  EXPECT_TRUE(absl::IsAborted(stale_open)) << stale_open;
  EXPECT_TRUE(absl::IsAborted(stale_mkdir)) << stale_mkdir;
  EXPECT_EQ(tier->Stats().state, TierState::kOk);
  EXPECT_EQ(tier->Stats().write_errors, 2u);
  ASSERT_TRUE(tier->Write(ns_, Key(3), data).ok());
  EXPECT_EQ(tier->Stats().refused_writes, 0u);
  EXPECT_TRUE(ReadBack(*tier, Key(3), data));
}

TEST_F(FileTierTest, ATornWriteIsAMissNeverWrongBytes) {
  FileTierOptions o = Options();
  o.files = &faults_;
  auto tier = Open(o);
  std::string data = Payload(kPayload, 12);
  faults_.TearWrites(true);  // The file lands with half its bytes, and the write says OK.
  ASSERT_TRUE(tier->Write(ns_, Key(1), data).ok());
  faults_.TearWrites(false);
  std::string buf(kPayload, '\0');
  EXPECT_FALSE(tier->Read(ns_, Key(1), absl::MakeSpan(buf)));
  EXPECT_EQ(tier->Stats().quarantined, 1u);
  EXPECT_FALSE(fs::exists(PathOf(Key(1))));
  EXPECT_NE(tier->Cached(ns_, Key(1)), FileTier::Presence::kPresent);
  // Written again whole, it reads back.
  ASSERT_TRUE(tier->Write(ns_, Key(1), data).ok());
  EXPECT_TRUE(ReadBack(*tier, Key(1), data));
}

TEST_F(FileTierTest, TheTierKeepsTimeByItsClock) {
  FakeClock clock;
  FileTierOptions o = FailingFirstWrites(1);
  o.clock = &clock;
  o.read_only_cooldown = absl::Seconds(30);
  auto tier = Open(o);
  std::string data = Payload(kPayload, 13);
  EXPECT_FALSE(tier->Write(ns_, Key(1), data).ok());
  clock.Advance(absl::Seconds(29));
  EXPECT_FALSE(tier->Write(ns_, Key(2), data).ok());  // Still cooling down.
  EXPECT_EQ(tier->Stats().state, TierState::kReadOnly);
  clock.Advance(absl::Seconds(2));
  EXPECT_TRUE(tier->Write(ns_, Key(3), data).ok());  // No sleep: the tier's own clock moved.
  EXPECT_EQ(tier->Stats().state, TierState::kOk);
}

TEST_F(FileTierTest, ReadIoErrorIsAMissWithoutQuarantine) {
  FileTierOptions o = Options();
  std::atomic<bool> failing{false};
  faults_.SetHook([&](absl::string_view op, const std::string&) {
    return op == "read" && failing ? absl::UnavailableError("EIO") : absl::OkStatus();
  });
  o.files = &faults_;
  auto tier = Open(o);
  std::string data = Payload(kPayload, 6);
  ASSERT_TRUE(tier->Write(ns_, Key(1), data).ok());
  failing = true;
  std::string buf(kPayload, '\0');
  EXPECT_FALSE(tier->Read(ns_, Key(1), absl::MakeSpan(buf)));
  EXPECT_EQ(tier->Stats().read_errors, 1u);
  EXPECT_TRUE(fs::exists(PathOf(Key(1))));  // The file may be fine: kept.
  failing = false;
  EXPECT_TRUE(ReadBack(*tier, Key(1), data));
}

TEST_F(FileTierTest, CorruptFileIsQuarantinedAndForgotten) {
  auto tier = Open(Options());
  std::string data = Payload(kPayload, 7);
  ASSERT_TRUE(tier->Write(ns_, Key(1), data).ok());
  {
    std::fstream f(PathOf(Key(1)), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 17);
    f.put('\x5a' ^ data[17]);
  }
  std::string buf(kPayload, '\0');
  EXPECT_FALSE(tier->Read(ns_, Key(1), absl::MakeSpan(buf)));
  EXPECT_FALSE(fs::exists(PathOf(Key(1))));
  EXPECT_EQ(tier->Stats().quarantined, 1u);
  EXPECT_EQ(tier->Cached(ns_, Key(1)), FileTier::Presence::kAbsent);
  EXPECT_FALSE(fs::is_empty(fs::path(root_) / ".quarantine"));
}

TEST_F(FileTierTest, PayloadOfAnotherSizeIsAMiss) {
  auto tier = Open(Options());
  ASSERT_TRUE(tier->Write(ns_, Key(1), Payload(kPayload, 8)).ok());
  std::string small(kPayload / 2, '\0');
  EXPECT_FALSE(tier->Read(ns_, Key(1), absl::MakeSpan(small)));
}

TEST_F(FileTierTest, SharedTierProbesAndCachesAbsence) {
  auto writer = Open(Options(/*shared=*/true));
  auto reader = Open(Options(/*shared=*/true));
  std::string data = Payload(kPayload, 9);
  EXPECT_EQ(reader->Cached(ns_, Key(1)), FileTier::Presence::kUnknown);
  EXPECT_FALSE(reader->Probe(ns_, Key(1)));
  EXPECT_EQ(reader->Cached(ns_, Key(1)), FileTier::Presence::kAbsent);
  ASSERT_TRUE(writer->Write(ns_, Key(1), data).ok());
  // Still remembered as absent until the negative cache expires.
  EXPECT_EQ(reader->Cached(ns_, Key(1)), FileTier::Presence::kAbsent);
  absl::SleepFor(absl::Milliseconds(250));
  EXPECT_EQ(reader->Cached(ns_, Key(1)), FileTier::Presence::kUnknown);
  EXPECT_TRUE(reader->Probe(ns_, Key(1)));
  EXPECT_EQ(reader->Cached(ns_, Key(1)), FileTier::Presence::kPresent);
  EXPECT_TRUE(ReadBack(*reader, Key(1), data));
  // Another daemon evicts it: the stale positive entry turns into a miss on read.
  ASSERT_TRUE(writer->Remove(ns_, Key(1)));
  std::string buf(kPayload, '\0');
  EXPECT_FALSE(reader->Read(ns_, Key(1), absl::MakeSpan(buf)));
  EXPECT_NE(reader->Cached(ns_, Key(1)), FileTier::Presence::kPresent);
}

TEST_F(FileTierTest, SharedTierForgetsBlocksAnotherDaemonDeleted) {
  // Issue 17: daemon X's index named a block the other daemon's trim (or an rm) deleted;
  // X kept reporting it and never wrote it again.
  // Without following the journals (file_tier_journal_test.cc has the deletions that
  // reach the index through them): an rm by hand is one a journal never names.
  FileTierOptions o = Options(/*shared=*/true);
  o.presence_ttl = absl::Milliseconds(200);
  o.follow_interval = absl::ZeroDuration();
  auto x = Open(o);
  auto other = Open(Options(/*shared=*/true));
  std::string data = Payload(kPayload, 5);
  ASSERT_TRUE(x->Write(ns_, Key(1), data).ok());
  ASSERT_TRUE(x->Write(ns_, Key(2), data).ok());
  EXPECT_EQ(x->Cached(ns_, Key(1)), FileTier::Presence::kPresent);
  ASSERT_TRUE(other->Probe(ns_, Key(1)));
  ASSERT_TRUE(other->Remove(ns_, Key(1)));
  ASSERT_TRUE(fs::remove(PathOf(Key(2))));
  // Past presence_ttl the entry is stale (a lookup probes it), and a probe drops it.
  absl::SleepFor(absl::Milliseconds(250));
  EXPECT_EQ(x->Cached(ns_, Key(1)), FileTier::Presence::kStale);
  EXPECT_FALSE(x->Probe(ns_, Key(1)));
  EXPECT_EQ(x->Cached(ns_, Key(1)), FileTier::Presence::kAbsent);
  EXPECT_EQ(x->Stats().blocks, 1u);
  // Storing a block whose file is gone writes it again (at once, whatever the TTL says).
  ASSERT_TRUE(x->Write(ns_, Key(2), data).ok());
  EXPECT_TRUE(fs::exists(PathOf(Key(2))));
  EXPECT_TRUE(ReadBack(*other, Key(2), data));
  // A block still on disk is not rewritten, and stays present.
  ASSERT_TRUE(x->Write(ns_, Key(2), data).ok());
  EXPECT_EQ(x->Stats().writes, 3u);
  EXPECT_EQ(x->Cached(ns_, Key(2)), FileTier::Presence::kPresent);
}

TEST_F(FileTierTest, AReadOfAFileDeletedElsewhereIsAMissThatFixesTheIndex) {
  // Issue 17: a file deleted through another mount is a miss (not a read error), counted
  // as one, and the index forgets it (not kept as present for presence_ttl).
  auto x = Open(Options(/*shared=*/true));
  std::string data = Payload(kPayload, 6);
  ASSERT_TRUE(x->Write(ns_, Key(1), data).ok());
  ASSERT_EQ(x->Cached(ns_, Key(1)), FileTier::Presence::kPresent);
  ASSERT_TRUE(fs::remove(PathOf(Key(1))));
  EXPECT_FALSE(ReadBack(*x, Key(1), data));
  TierStats st = x->Stats();
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.read_errors, 0u);
  EXPECT_EQ(st.quarantined, 0u);
  EXPECT_EQ(st.blocks, 0u);
  EXPECT_NE(x->Cached(ns_, Key(1)), FileTier::Presence::kPresent);
}

TEST_F(FileTierTest, ConcurrentWritersOfOneKeyNeverTearIt) {
  auto first = Open(Options(/*shared=*/true));
  const std::string one = Payload(kPayload, 12), two = Payload(kPayload, 13);
  ASSERT_TRUE(first->Write(ns_, Key(1), one).ok());
  // Two writers (as two nodes' daemons would) rewrite the same key over and over.
  std::atomic<bool> stop{false};
  auto hammer = [&](const std::string& data) {
    auto header = MakeBlockHeader(ns_.fingerprint, Key(1), data, 0);
    while (!stop) ASSERT_TRUE(WriteBlockFile(PathOf(Key(1)), *header, data).ok());
  };
  std::thread ta(hammer, std::cref(one));
  std::thread tb(hammer, std::cref(two));
  auto reader = Open(Options(/*shared=*/true));
  int hits = 0;
  for (absl::Time end = absl::Now() + absl::Milliseconds(500); absl::Now() < end;) {
    std::string got(kPayload, '\0');
    bool hit = reader->Read(ns_, Key(1), absl::MakeSpan(got));
    EXPECT_TRUE(hit) << "a reader saw no file, or a good file failed verification";
    EXPECT_TRUE(!hit || got == one || got == two) << "a torn block was served";
    if (!hit) break;
    ++hits;
  }
  stop = true;
  ta.join();
  tb.join();
  EXPECT_GT(hits, 10);
  EXPECT_EQ(reader->Stats().quarantined, 0u);
  size_t temps = 0;
  for (const auto& e : fs::recursive_directory_iterator(root_)) {
    temps += e.path().string().find(".tmp.") != std::string::npos;
  }
  EXPECT_EQ(temps, 0u);
}

TEST_F(FileTierTest, SlowDiskProbeDoesNotHoldTheIndex) {
  FileTierOptions o = Options(/*shared=*/true);
  faults_.SetHook([](absl::string_view op, const std::string&) {
    if (op == "probe") absl::SleepFor(absl::Milliseconds(500));
    return absl::OkStatus();
  });
  o.files = &faults_;
  auto tier = Open(o);
  std::thread slow([&] { tier->Probe(ns_, Key(1)); });
  absl::SleepFor(absl::Milliseconds(50));
  absl::Time start = absl::Now();
  EXPECT_EQ(tier->Cached(ns_, Key(2)), FileTier::Presence::kUnknown);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  slow.join();
}

TEST_F(FileTierTest, ClearRemovesOneNamespaceOrAll) {
  auto tier = Open(Options());
  std::string data = Payload(kPayload, 14);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier->Write(ns_, Key(i), data).ok());
  EXPECT_EQ(tier->Clear(std::string("ffffffffffffffffffffffffffffffff")), 0u);
  EXPECT_EQ(tier->Clear(ns_.fingerprint), 3u);
  EXPECT_EQ(tier->Stats().blocks, 0u);
  EXPECT_FALSE(fs::exists(PathOf(Key(0))));
}

TEST_F(FileTierTest, ObserverHearsOneRemovalPerAnnouncedStore) {
  struct Notice {
    std::string key;
    bool stored;
    RemovalCause cause;
  };
  std::vector<Notice> heard;
  std::mutex heard_mu;
  FileTierOptions o = Options();
  o.capacity_bytes = 4 * kFileBytes;
  o.high_watermark = 1.0;
  o.low_watermark = 0.75;
  o.observer = [&](NamespaceId ns, absl::string_view key, bool stored, RemovalCause cause) {
    EXPECT_NE(ns, 0u);  // the tier's own id of ns_
    std::lock_guard<std::mutex> lock(heard_mu);
    heard.push_back({std::string(key), stored, cause});
  };
  std::string data = Payload(kPayload, 15);
  {
    auto tier = Open(o);
    // Key 4 makes room down to 3 files: keys 0 and 1 are evicted.
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(tier->Write(ns_, Key(i), data).ok());
    ASSERT_TRUE(tier->Remove(ns_, Key(2)));
    EXPECT_EQ(tier->Clear(ns_.fingerprint), 2u);
  }
  std::map<std::string, int> balance;
  for (const Notice& n : heard) balance[n.key] += n.stored ? 1 : -1;
  for (const auto& [key, b] : balance) EXPECT_EQ(b, 0) << key;
  ASSERT_EQ(heard.size(), 10u);
  EXPECT_FALSE(heard[4].stored);
  EXPECT_EQ(heard[4].cause, RemovalCause::kEvicted);  // key 0, to make room for key 4
  EXPECT_TRUE(heard[6].stored);                       // key 4
  EXPECT_EQ(heard[7].cause, RemovalCause::kAdminEvict);
  EXPECT_EQ(heard[9].cause, RemovalCause::kCleared);
  // Files found by a restarted tier's scan were not written by it: nothing is announced.
  heard.clear();
  ASSERT_TRUE(Open(Options())->Write(ns_, Key(7), data).ok());
  auto restarted = Open(o);
  EXPECT_TRUE(restarted->Remove(ns_, Key(7)));
  EXPECT_TRUE(heard.empty());
}

TEST_F(FileTierTest, RootThatIsAFileIsRefused) {
  std::string file = root_ + "/plain-file";
  std::ofstream(file) << "x";
  FileTierOptions o = Options();
  o.root = file;
  EXPECT_TRUE(absl::IsFailedPrecondition(FileTier::Open(o).status()));
}

// Issue 44 item 4: the tier keys its index by the daemon's namespace ids (one id space with
// L1 and the wire): blocks a scan finds before any engine registered their namespace are
// found under the id that namespace then gets.
TEST_F(FileTierTest, BlocksFoundOnDiskUseTheDaemonsNamespaceIds) {
  const std::string data = Payload(kPayload, 9);
  {
    auto writer = Open(Options());  // a daemon before a restart
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(writer->Write(ns_, Key(i), data).ok());
  }
  NamespaceRegistry registry;
  // Another namespace first, so that the ids of the registry and of a tier alone differ.
  NamespaceSpec other = ns_.spec;
  other.salt = "another";
  ASSERT_TRUE(registry.Register(7, other).ok());
  FileTierOptions o = Options();
  o.namespace_ids = &registry;
  auto tier = Open(o);  // its warm-up scan finds the three files
  const NamespaceId found = registry.IdOf(ns_.fingerprint);
  EXPECT_EQ(found, 2u);
  auto registered = registry.Register(8, ns_.spec);
  ASSERT_TRUE(registered.ok());
  EXPECT_EQ(registered->id, found);
  TierNamespace tn = ns_;
  tn.id = registered->id;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(tier->Cached(tn, Key(i)), FileTier::Presence::kPresent) << i;
    EXPECT_TRUE(ReadBack(*tier, Key(i), data)) << i;
  }
  EXPECT_EQ(tier->Cached(tn, Key(3)), FileTier::Presence::kAbsent);
  // A namespace id the registry never gave this fingerprint names nothing here.
  TierNamespace wrong = tn;
  wrong.id = 1;
  EXPECT_NE(tier->Cached(wrong, Key(0)), FileTier::Presence::kPresent);
}

}  // namespace
}  // namespace kvstrata
