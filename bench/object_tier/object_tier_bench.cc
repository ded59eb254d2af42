// object_tier_bench: the object tier's write and read throughput (BlockTier::WriteMany /
// ReadMany of a tier built as the daemon builds it: a [[tiers]] entry through LoadConfig and
// MakeTier) beside a plain libcurl client in a tight loop on the same S3 server: a curl multi
// handle with `--concurrency` transfers on the wire, signed the same way (CURLOPT_AWS_SIGV4,
// UNSIGNED-PAYLOAD), PUTting and GETting objects of the tier's object size (a block file:
// 4 KiB header + payload). Rounds alternate tier and baseline; each uses fresh keys. The
// server is started by bench/object_tier/run.py (SeaweedFS), which passes its endpoint.
//
//   object_tier_bench --endpoint=http://127.0.0.1:PORT --bucket=B --credentials_file=F
//                     [--blocks=1000 --block_bytes=65536 --concurrency=32 --rounds=3]
#include <curl/curl.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/tiers/tier_bench_util.h"
#include "daemon/config/config_loader.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/object/s3_credentials.h"
#include "daemon/tiers/tier_factory.h"

ABSL_FLAG(std::string, endpoint, "", "http://host:port of the S3 server");
ABSL_FLAG(std::string, bucket, "", "an existing bucket");
ABSL_FLAG(std::string, credentials_file, "", "AWS shared-credentials file");
ABSL_FLAG(std::string, prefix, "bench", "object name prefix (a run adds its pid)");
ABSL_FLAG(int, blocks, 1000, "blocks per round and side");
ABSL_FLAG(int, block_bytes, 64 << 10, "payload bytes per block");
ABSL_FLAG(int, concurrency, 32, "requests on the wire (the tier's max_in_flight)");
ABSL_FLAG(int, batch, 256, "keys per WriteMany / ReadMany call");
ABSL_FLAG(int, threads, 32,
          "threads of the daemon's path: one Write per call, as a tier's io_threads write blocks "
          "down (0 = skip that phase)");
ABSL_FLAG(int, rounds, 3, "rounds (each: tier write, baseline write, tier read, baseline read)");
ABSL_FLAG(std::string, baseline_put, "post",
          "how the baseline PUTs: 'upload' (CURLOPT_UPLOAD: curl sends Expect: 100-continue and "
          "waits for the 100) or 'post' (the POST body path with the method PUT: no Expect "
          "below 1 MiB)");

namespace kvstrata::bench {
namespace {

struct Transfer {
  const std::string* body = nullptr;
  size_t sent = 0;
  std::string* into = nullptr;
  long status = 0;
};

size_t Send(char* out, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  const size_t take = std::min(size * n, t->body->size() - t->sent);
  std::copy_n(t->body->data() + t->sent, take, out);
  t->sent += take;
  return take;
}
size_t Receive(char* in, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  t->into->append(in, size * n);
  return size * n;
}

// The plain client: `keys` PUT (bodies[i]) or GET (into outs[i]), `width` at once.
class PlainClient {
 public:
  PlainClient(std::string endpoint, std::string bucket, S3Credentials creds, int width, bool post)
      : base_(absl::StrCat(endpoint, "/", bucket, "/")), creds_(std::move(creds)), post_(post) {
    multi_ = curl_multi_init();
    for (int i = 0; i < width; ++i) easy_.push_back(curl_easy_init());
  }
  ~PlainClient() {
    for (CURL* e : easy_) curl_easy_cleanup(e);
    curl_multi_cleanup(multi_);
  }
  // Returns the number of 2xx answers: PUTs of `bodies`, else GETs into `outs`, else DELETEs.
  int Run(const std::vector<std::string>& keys, const std::vector<std::string>* bodies,
          std::vector<std::string>* outs) {
    size_t next = 0;
    int ok = 0, running = 0;
    std::vector<Transfer> t(easy_.size());
    std::vector<curl_slist*> headers(easy_.size(), nullptr);
    auto start = [&](size_t slot) {
      CURL* e = easy_[slot];
      curl_easy_reset(e);
      const size_t i = next++;
      t[slot] = Transfer{};
      const std::string url = base_ + keys[i];
      curl_easy_setopt(e, CURLOPT_URL, url.c_str());
      curl_easy_setopt(e, CURLOPT_PRIVATE, reinterpret_cast<char*>(slot));
      curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(e, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
      curl_easy_setopt(e, CURLOPT_USERNAME, creds_.access_key_id.c_str());
      curl_easy_setopt(e, CURLOPT_PASSWORD, creds_.secret_access_key.c_str());
      curl_slist_free_all(headers[slot]);
      headers[slot] = curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
      if (bodies != nullptr) {
        t[slot].body = &(*bodies)[i];
        const auto size = static_cast<curl_off_t>((*bodies)[i].size());
        headers[slot] = curl_slist_append(headers[slot], "Content-Type: application/octet-stream");
        if (post_) {
          curl_easy_setopt(e, CURLOPT_POST, 1L);
          curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
          curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, size);
        } else {
          curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
          curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, size);
        }
        curl_easy_setopt(e, CURLOPT_READFUNCTION, Send);
        curl_easy_setopt(e, CURLOPT_READDATA, &t[slot]);
      } else if (outs != nullptr) {
        (*outs)[i].clear();
        t[slot].into = &(*outs)[i];
      } else {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
      }
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, Receive);
      static std::string sink;
      if (t[slot].into == nullptr) t[slot].into = &sink;
      curl_easy_setopt(e, CURLOPT_WRITEDATA, &t[slot]);
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers[slot]);
      curl_multi_add_handle(multi_, e);
      ++running;
    };
    for (size_t s = 0; s < easy_.size() && next < keys.size(); ++s) start(s);
    while (running > 0) {
      int still = 0;
      curl_multi_perform(multi_, &still);
      CURLMsg* m;
      int left = 0;
      while ((m = curl_multi_info_read(multi_, &left)) != nullptr) {
        if (m->msg != CURLMSG_DONE) continue;
        char* slot_p = nullptr;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &slot_p);
        long status = 0;
        curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
        ok += (m->data.result == CURLE_OK && status / 100 == 2) ? 1 : 0;
        curl_multi_remove_handle(multi_, m->easy_handle);
        --running;
        if (next < keys.size()) start(reinterpret_cast<size_t>(slot_p));
      }
      if (running > 0) curl_multi_poll(multi_, nullptr, 0, 100, nullptr);
    }
    for (curl_slist* h : headers) curl_slist_free_all(h);
    return ok;
  }

 private:
  std::string base_;
  S3Credentials creds_;
  bool post_;
  CURLM* multi_;
  std::vector<CURL*> easy_;
};

// This process's CPU time (every thread: the tier's own threads too), in seconds.
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main() {
  const int blocks = absl::GetFlag(FLAGS_blocks), rounds = absl::GetFlag(FLAGS_rounds);
  const int width = absl::GetFlag(FLAGS_concurrency), batch = absl::GetFlag(FLAGS_batch);
  const uint64_t block_bytes = absl::GetFlag(FLAGS_block_bytes);
  const uint64_t object_bytes = BlockFileBytes(block_bytes);
  const std::string prefix = absl::StrCat(absl::GetFlag(FLAGS_prefix), "-", ::getpid());
  const std::string config_path = absl::StrCat("/tmp/object-tier-bench-", ::getpid(), ".toml");
  std::ofstream(config_path) << "[[tiers]]\nlabel = \"s3\"\nkind = \"object\"\nendpoint = \""
                             << absl::GetFlag(FLAGS_endpoint) << "\"\nbucket = \""
                             << absl::GetFlag(FLAGS_bucket) << "\"\nprefix = \"" << prefix
                             << "/tier\"\ncredentials_file = \""
                             << absl::GetFlag(FLAGS_credentials_file)
                             << "\"\ncapacity = \"64GiB\"\nmax_in_flight = " << width << "\n";
  absl::StatusOr<Config> config = LoadConfig(config_path, {});
  std::remove(config_path.c_str());
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.status().ToString().c_str()), 1;
  auto open = [&]() -> std::unique_ptr<BlockTier> {
    absl::StatusOr<TierDescriptor> d = DescribeTier(config->tiers[0]);
    if (!d.ok()) return nullptr;
    d->id = Tier::kL2;
    auto made = MakeTier(config->tiers[0], *d, {});
    if (!made.ok()) std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return made.ok() ? *std::move(made) : nullptr;
  };
  absl::StatusOr<S3Credentials> creds =
      LoadCredentials(absl::GetFlag(FLAGS_credentials_file), "default");
  absl::StatusOr<TierNamespace> ns = BenchNamespace(block_bytes, "object-tier-bench");
  if (!creds.ok() || !ns.ok()) return std::fprintf(stderr, "credentials or namespace\n"), 1;
  PlainClient plain(absl::GetFlag(FLAGS_endpoint), absl::GetFlag(FLAGS_bucket), *creds, width,
                    absl::GetFlag(FLAGS_baseline_put) == "post");
  // The other way of PUTting, beside it: what curl's Expect: 100-continue costs a plain client.
  PlainClient other(absl::GetFlag(FLAGS_endpoint), absl::GetFlag(FLAGS_bucket), *creds, width,
                    absl::GetFlag(FLAGS_baseline_put) != "post");
  std::printf(
      "object_tier_bench: %d blocks of %llu bytes (objects of %llu bytes), "
      "concurrency %d, batches of %d, %d rounds, baseline PUTs by %s\n",
      blocks, static_cast<unsigned long long>(block_bytes),
      static_cast<unsigned long long>(object_bytes), width, batch, rounds,
      absl::GetFlag(FLAGS_baseline_put).c_str());
  const int threads = absl::GetFlag(FLAGS_threads);
  std::vector<double> tw, tr, pw, pr, ow, tt;
  std::vector<double> cpu_tw, cpu_tr, cpu_pw, cpu_pr;  // CPU ms of this process per phase
  const double mb = static_cast<double>(blocks) * static_cast<double>(object_bytes) / 1e6;
  // One writer for every round, as a daemon keeps its tier: its first write takes the tier's
  // first grant of room (ObjectUsage::Reserve, a few round trips), which a long-lived tier pays
  // once per grant, not per round. Each round's reader is fresh (every read goes to the bucket).
  std::unique_ptr<BlockTier> writer = open();
  if (writer == nullptr) return 1;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::string> keys, payloads, names, bodies;
    for (int i = 0; i < blocks; ++i) {
      keys.push_back(BenchKey(static_cast<uint64_t>(round), static_cast<uint64_t>(i)));
      payloads.emplace_back(block_bytes, '\0');
      FillPayload(keys.back(), payloads.back().data(), block_bytes);
      // Spread over two levels of 256 folders, as the tier spreads its objects.
      const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
      names.push_back(absl::StrCat(prefix, "/plain/", round, "/",
                                   absl::Hex(h >> 24, absl::kZeroPad2), "/",
                                   absl::Hex((h >> 16) & 0xff, absl::kZeroPad2), "/", i, ".kv"));
      bodies.push_back(std::string(object_bytes - block_bytes, 'h') + payloads.back());
    }
    // The tier and the baseline take turns going first (a round's second writer meets the
    // server's work on the first one's objects).
    const bool plain_first = round % 2 == 1;
    int tier_ok = 0, plain_put = 0;
    std::vector<std::string> others;
    for (const std::string& n : names) others.push_back(n + ".other");
    auto plain_write = [&] {
      const double t0 = MonotonicSeconds(), c0 = CpuSeconds();
      plain_put = plain.Run(names, &bodies, nullptr);
      pw.push_back(mb / (MonotonicSeconds() - t0));
      cpu_pw.push_back(1e3 * (CpuSeconds() - c0));
      const double t1 = MonotonicSeconds();
      other.Run(others, &bodies, nullptr);
      ow.push_back(mb / (MonotonicSeconds() - t1));
    };
    if (plain_first) plain_write();
    double t0 = MonotonicSeconds(), c0 = CpuSeconds();
    for (int i = 0; i < blocks; i += batch) {
      const int n = std::min(batch, blocks - i);
      std::vector<absl::string_view> k(keys.begin() + i, keys.begin() + i + n);
      std::vector<absl::string_view> p(payloads.begin() + i, payloads.begin() + i + n);
      auto written = writer->WriteMany(*ns, k, p);
      if (written.ok()) {
        for (const absl::Status& s : *written) tier_ok += s.ok() ? 1 : 0;
      }
    }
    tw.push_back(mb / (MonotonicSeconds() - t0));
    cpu_tw.push_back(1e3 * (CpuSeconds() - c0));
    // The daemon's path: WriteDown's I/O threads each write one block per call.
    int thread_ok = 0;
    if (threads > 0) {
      std::vector<std::string> more_keys;
      for (int i = 0; i < blocks; ++i) {
        more_keys.push_back(
            BenchKey(static_cast<uint64_t>(rounds + round), static_cast<uint64_t>(i)));
      }
      std::atomic<int> next{0}, ok{0};
      t0 = MonotonicSeconds();
      std::vector<std::thread> pool;
      for (int w = 0; w < threads; ++w) {
        pool.emplace_back([&] {
          for (int i = next++; i < blocks; i = next++) {
            ok += writer->Write(*ns, more_keys[i], payloads[i]).ok() ? 1 : 0;
          }
        });
      }
      for (std::thread& t : pool) t.join();
      tt.push_back(mb / (MonotonicSeconds() - t0));
      thread_ok = ok.load();
    }
    if (!plain_first) plain_write();
    std::unique_ptr<BlockTier> reader = open();  // a fresh index: every read goes to the bucket
    if (reader == nullptr) return 1;
    std::vector<std::string> out(static_cast<size_t>(blocks), std::string(block_bytes, '\0'));
    std::vector<std::string> got(static_cast<size_t>(blocks));
    int hits = 0, exact = 0, plain_get = 0, plain_exact = 0;
    auto plain_read = [&] {
      const double start = MonotonicSeconds(), cpu = CpuSeconds();
      plain_get = plain.Run(names, nullptr, &got);
      pr.push_back(mb / (MonotonicSeconds() - start));
      cpu_pr.push_back(1e3 * (CpuSeconds() - cpu));
    };
    if (plain_first) plain_read();
    t0 = MonotonicSeconds(), c0 = CpuSeconds();
    for (int i = 0; i < blocks; i += batch) {
      const int n = std::min(batch, blocks - i);
      std::vector<absl::string_view> k(keys.begin() + i, keys.begin() + i + n);
      std::vector<absl::Span<char>> dest;
      for (int j = i; j < i + n; ++j) dest.push_back(absl::MakeSpan(out[j]));
      auto read = reader->ReadMany(*ns, k, dest);
      if (read.ok()) {
        for (bool b : *read) hits += b ? 1 : 0;
      }
    }
    tr.push_back(mb / (MonotonicSeconds() - t0));
    cpu_tr.push_back(1e3 * (CpuSeconds() - c0));
    if (!plain_first) plain_read();
    for (int i = 0; i < blocks; ++i) exact += out[i] == payloads[i] ? 1 : 0;
    for (int i = 0; i < blocks; ++i) plain_exact += got[i] == bodies[i] ? 1 : 0;
    std::printf(
        "round %d (%s first): write tier %.1f MB/s (%d ok) plain %.1f MB/s (%d ok; the other "
        "PUT %.1f; tier Write from %d threads %.1f, %d ok) | read tier %.1f MB/s (%d hits, %d "
        "exact) plain %.1f MB/s (%d ok, %d exact)\n",
        round, plain_first ? "plain" : "tier", tw.back(), tier_ok, pw.back(), plain_put, ow.back(),
        threads, tt.empty() ? 0.0 : tt.back(), thread_ok, tr.back(), hits, exact, pr.back(),
        plain_get, plain_exact);
    // Every round's objects go, so that a small store (radosgw.sh's memstore) never fills.
    (void)reader->Clear(std::nullopt);
    plain.Run(names, nullptr, nullptr);
    plain.Run(others, nullptr, nullptr);
  }
  std::printf(
      "median: write tier %.1f MB/s, plain %.1f MB/s: %.3fx (the other PUT: %.1f MB/s) | read "
      "tier %.1f MB/s, plain %.1f MB/s: %.3fx\n",
      Median(tw), Median(pw), Median(tw) / Median(pw), Median(ow), Median(tr), Median(pr),
      Median(tr) / Median(pr));
  if (!tt.empty()) {
    std::printf(
        "median: tier Write from %d threads (the daemon's write-down) %.1f MB/s: %.3fx plain\n",
        threads, Median(tt), Median(tt) / Median(pw));
  }
  // What the client side costs the shared cores (the server runs on the same machine).
  std::printf(
      "median CPU of this process per round: write tier %.0f ms, plain %.0f ms | read tier %.0f "
      "ms, plain %.0f ms\n",
      Median(cpu_tw), Median(cpu_pw), Median(cpu_tr), Median(cpu_pr));
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace kvstrata::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const int rc = kvstrata::bench::Main();
  curl_global_cleanup();
  return rc;
}
