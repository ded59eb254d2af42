#include "bench/rpc/host_pipeline.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cpp/block_copy.h"
#include "daemon/common/mutex.h"
#include "daemon/transfer/cond_var.h"

namespace kvstrata::bench {
namespace {

// One batch: the RPC thread fills `copies` from ReserveStore / AcquireLoad, the copy
// thread moves the bytes, the RPC thread ends it with CommitStore / ReleaseLoad.
struct Batch {
  uint64_t id = 0;                                  // reservation or load; 0: nothing to end
  std::vector<std::pair<size_t, uint64_t>> copies;  // (key index, slot offset)
};

// Starts a batch of keys [first, last): ReserveStore (store) or AcquireLoad (load).
absl::StatusOr<Batch> Begin(const Transfer& t, const std::vector<std::string>& keys, size_t first,
                            size_t last, bool store) {
  Batch batch;
  if (store) {
    v1::ReserveStoreRequest request;
    request.set_session_id(t.session);
    request.set_namespace_id(t.ns);
    for (size_t i = first; i < last; ++i) request.add_keys(keys[i]);
    absl::StatusOr<v1::ReserveStoreResponse> r = Call(*t.stub, &Stub::ReserveStore, request);
    if (!r.ok()) return r.status();
    batch.id = r->reservation_id();
    for (int i = 0; i < r->slots_size(); ++i) {
      const v1::SlotRef& slot = r->slots(i);
      if (slot.state() != v1::SlotRef::STATE_RESERVED) continue;
      if (t.region->At(slot.offset(), t.block_bytes) == nullptr || slot.length() != t.block_bytes) {
        return absl::InternalError(absl::StrCat("bad slot ", slot.offset(), "+", slot.length()));
      }
      batch.copies.emplace_back(first + i, slot.offset());
    }
    return batch;
  }
  v1::AcquireLoadRequest request;
  request.set_session_id(t.session);
  request.set_namespace_id(t.ns);
  for (size_t i = first; i < last; ++i) request.add_keys(keys[i]);
  absl::StatusOr<v1::AcquireLoadResponse> r = Call(*t.stub, &Stub::AcquireLoad, request);
  if (!r.ok()) return r.status();
  batch.id = r->load_id();
  for (int i = 0; i < r->slots_size(); ++i) {
    const v1::SlotRef& slot = r->slots(i);
    if (slot.state() != v1::SlotRef::STATE_READY) continue;
    if (t.region->At(slot.offset(), t.block_bytes) == nullptr || slot.length() != t.block_bytes) {
      return absl::InternalError(absl::StrCat("bad slot ", slot.offset(), "+", slot.length()));
    }
    batch.copies.emplace_back(first + i, slot.offset());
  }
  return batch;
}

// Ends a copied batch: CommitStore (store; returns blocks committed) or ReleaseLoad
// (load; returns blocks copied).
absl::StatusOr<size_t> End(const Transfer& t, const Batch& batch, bool store) {
  if (batch.id == 0) return 0;
  if (store) {
    v1::CommitStoreRequest request;
    request.set_session_id(t.session);
    request.set_reservation_id(batch.id);
    absl::StatusOr<v1::CommitStoreResponse> r = Call(*t.stub, &Stub::CommitStore, request);
    if (!r.ok()) return r.status();
    return r->committed_blocks();
  }
  v1::ReleaseLoadRequest request;
  request.set_session_id(t.session);
  request.set_load_id(batch.id);
  absl::StatusOr<v1::ReleaseLoadResponse> r = Call(*t.stub, &Stub::ReleaseLoad, request);
  if (!r.ok()) return r.status();
  return batch.copies.size();
}

void CopyBatch(const Transfer& t, const Batch& batch, char* host, bool store, CopyKind kind) {
  for (const auto& [index, offset] : batch.copies) {
    char* slot = t.region->data() + offset;
    char* tensor = host + index * t.block_bytes;
    if (store) {
      CopyBytes(kind, slot, tensor, t.block_bytes);
    } else {
      CopyBytes(kind, tensor, slot, t.block_bytes);
    }
  }
}

absl::StatusOr<size_t> Sequential(const Transfer& t, const std::vector<std::string>& keys,
                                  char* host, bool store, const TransferOptions& o) {
  size_t done = 0;
  for (size_t first = 0; first < keys.size(); first += o.batch) {
    absl::StatusOr<Batch> batch =
        Begin(t, keys, first, std::min(keys.size(), first + o.batch), store);
    if (!batch.ok()) return batch.status();
    CopyBatch(t, *batch, host, store, o.copy);
    absl::StatusOr<size_t> ended = End(t, *batch, store);
    if (!ended.ok()) return ended.status();
    done += *ended;
  }
  return done;
}

// The copy thread's queue: batches [copied, submitted) wait for their copy.
class CopyQueue {
 public:
  // Appends a batch; the reference stays valid (std::deque).
  void Submit(Batch batch) {
    MutexLock lock(&mu_);
    batches_.push_back(std::move(batch));
    ++submitted_;
    cv_.SignalAll();
  }
  void Close() {
    MutexLock lock(&mu_);
    closed_ = true;
    cv_.SignalAll();
  }
  // Copy thread: the next batch to copy, or nullptr once closed and drained.
  Batch* Next() {
    MutexLock lock(&mu_);
    cv_.Wait(&mu_,
             [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return closed_ || copied_ < submitted_; });
    return copied_ < submitted_ ? &batches_[copied_] : nullptr;
  }
  void MarkCopied() {
    MutexLock lock(&mu_);
    ++copied_;
    cv_.SignalAll();
  }
  // RPC thread: waits until batch `n` (0-based) is copied; returns it.
  Batch& WaitCopied(size_t n) {
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return copied_ > n; });
    return batches_[n];
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<Batch> batches_ ABSL_GUARDED_BY(mu_);
  size_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  size_t copied_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<size_t> Pipelined(const Transfer& t, const std::vector<std::string>& keys,
                                 char* host, bool store, const TransferOptions& o) {
  CopyQueue queue;
  std::thread copier([&] {
    while (Batch* batch = queue.Next()) {
      CopyBatch(t, *batch, host, store, o.copy);
      queue.MarkCopied();
    }
  });
  absl::Status status;
  size_t done = 0, begun = 0, ended = 0;
  auto end_next = [&]() -> absl::Status {
    absl::StatusOr<size_t> n = End(t, queue.WaitCopied(ended++), store);
    if (!n.ok()) return n.status();
    done += *n;
    return absl::OkStatus();
  };
  for (size_t first = 0; status.ok() && first < keys.size(); first += o.batch) {
    absl::StatusOr<Batch> batch =
        Begin(t, keys, first, std::min(keys.size(), first + o.batch), store);
    if (!batch.ok()) {
      status = batch.status();
      break;
    }
    queue.Submit(*std::move(batch));
    ++begun;
    if (begun >= 2) status = end_next();  // batch begun-2 (its copy overlapped this Begin)
  }
  while (status.ok() && ended < begun) status = end_next();
  queue.Close();
  copier.join();
  if (!status.ok()) return status;
  return done;
}

}  // namespace

void CopyBytes(CopyKind kind, void* dst, const void* src, size_t bytes) {
  if (kind == CopyKind::kStream) {
    StreamCopy(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

absl::StatusOr<size_t> StoreAll(const Transfer& t, const std::vector<std::string>& keys,
                                const char* host, const TransferOptions& options) {
  char* tensor = const_cast<char*>(host);  // only read: store copies host -> region
  return options.pipelined ? Pipelined(t, keys, tensor, /*store=*/true, options)
                           : Sequential(t, keys, tensor, /*store=*/true, options);
}

absl::StatusOr<size_t> LoadAll(const Transfer& t, const std::vector<std::string>& keys, char* host,
                               const TransferOptions& options) {
  return options.pipelined ? Pipelined(t, keys, host, /*store=*/false, options)
                           : Sequential(t, keys, host, /*store=*/false, options);
}

}  // namespace kvstrata::bench
