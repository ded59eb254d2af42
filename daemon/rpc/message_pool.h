// MessagePool: a grpc::MessageAllocator for callback unary methods that recycles request
// and response messages instead of allocating fresh ones per call. A cleared protobuf
// message keeps its repeated elements (the std::string of each key, each SlotRef) for the
// next parse or build, so a Lookup of 1,000 keys on a recycled request makes no heap
// allocation where a fresh message makes ~1,000 (measured: parse 68 us fresh, 10 us
// recycled; response build + serialize 42 us fresh).
//
// Bounded: at most `max_pooled` idle holders are kept, and a holder whose messages grew
// beyond `max_repeated` repeated elements (a 65,536-key call) is freed rather than kept.
//
// Thread safety: thread-safe (gRPC allocates and releases from its threads).
#ifndef KVSTRATA_DAEMON_RPC_MESSAGE_POOL_H_
#define KVSTRATA_DAEMON_RPC_MESSAGE_POOL_H_

#include <grpcpp/support/message_allocator.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "daemon/common/mutex.h"

namespace kvstrata {

template <typename Request, typename Response>
class MessagePool final : public grpc::MessageAllocator<Request, Response> {
 public:
  // `size` reports how many repeated elements a holder's messages hold (for the bound).
  using SizeFn = std::function<size_t(const Request&, const Response&)>;

  explicit MessagePool(SizeFn size, size_t max_pooled = 32, size_t max_repeated = 4096)
      : size_(std::move(size)), max_pooled_(max_pooled), max_repeated_(max_repeated) {}
  MessagePool(const MessagePool&) = delete;
  MessagePool& operator=(const MessagePool&) = delete;
  ~MessagePool() override = default;

  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    {
      MutexLock lock(&mu_);
      if (!idle_.empty()) {
        Holder* holder = idle_.back().release();
        idle_.pop_back();
        return holder;
      }
    }
    return new Holder(this);
  }

 private:
  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    explicit Holder(MessagePool* pool) : pool_(pool) {
      this->set_request(&request_);
      this->set_response(&response_);
    }
    void Release() override { pool_->Recycle(this); }
    Request request_;
    Response response_;

   private:
    MessagePool* const pool_;
  };

  void Recycle(Holder* raw) {
    std::unique_ptr<Holder> holder(raw);
    if (size_(holder->request_, holder->response_) > max_repeated_) return;  // freed
    holder->request_.Clear();
    holder->response_.Clear();
    MutexLock lock(&mu_);
    if (idle_.size() < max_pooled_) idle_.push_back(std::move(holder));
  }

  const SizeFn size_;
  const size_t max_pooled_;
  const size_t max_repeated_;
  Mutex mu_;
  std::vector<std::unique_ptr<Holder>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_RPC_MESSAGE_POOL_H_
