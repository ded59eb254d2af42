// FaultFileSystem: a BlockFileSystem (daemon/tiers/block_file_system.h) that passes every
// call on to another (the real POSIX one by default) after asking the test's hook, so a real
// FileTier on a real directory sees the faults a disk gives. The hook gets the operation and
// the path and may sleep (a slow disk); a non-OK status is that operation failing with it:
//   "write"     WriteBlock returns it (RESOURCE_EXHAUSTED stands for ENOSPC, others for EIO)
//   "read"      ReadBlock is an I/O-error miss
//   "probe"     Stat finds nothing
//   "scan"      ListDirectory finds nothing
//   "namespace" WriteNamespace returns it
//   "ledger"    UpdateLockedFile returns it (a filesystem without flock or O_DIRECT)
//   "journal"   AppendFile and ReadFileRange return it (a shared tier's write journals)
// TearWrites(true) makes each later block write land torn: the file is renamed into place
// with only its first half (what a crash without fsync can leave), and the write reports
// success. Thread-safe. Header-only.
#ifndef KVSTRATA_DAEMON_TESTING_FAULT_FILE_SYSTEM_H_
#define KVSTRATA_DAEMON_TESTING_FAULT_FILE_SYSTEM_H_

#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "daemon/common/mutex.h"
#include "daemon/tiers/block_file_system.h"

namespace kvstrata {

class FaultFileSystem final : public BlockFileSystem {
 public:
  using Hook = std::function<absl::Status(absl::string_view op, const std::string& path)>;

  explicit FaultFileSystem(BlockFileSystem* base = BlockFileSystem::Default()) : base_(base) {}

  void SetHook(Hook hook) {
    MutexLock lock(&mu_);
    hook_ = std::move(hook);
  }
  void TearWrites(bool tear) { tear_.store(tear); }

  absl::Status MakeDirectories(const std::string& dir) override {
    return base_->MakeDirectories(dir);
  }
  absl::StatusOr<BlockWriteInfo> WriteBlock(const std::string& path, const BlockHeader& header,
                                            absl::string_view payload,
                                            const BlockWriteOptions& options) override {
    if (absl::Status s = Ask("write", path); !s.ok()) return s;
    absl::StatusOr<BlockWriteInfo> written = base_->WriteBlock(path, header, payload, options);
    if (written.ok() && tear_.load()) {
      std::optional<FileInfo> info = base_->Stat(path);
      if (info.has_value() && ::truncate(path.c_str(), static_cast<off_t>(info->size / 2)) != 0) {
        return absl::InternalError("could not tear " + path);
      }
    }
    return written;
  }
  BlockReadResult ReadBlock(const std::string& path, absl::string_view fingerprint,
                            absl::string_view key, absl::Span<char> dest) override {
    if (absl::Status s = Ask("read", path); !s.ok()) {
      BlockReadResult miss;
      miss.miss = BlockMiss::kIoError;
      miss.detail = std::string(s.message());
      return miss;
    }
    return base_->ReadBlock(path, fingerprint, key, dest);
  }
  absl::StatusOr<std::string> WriteNamespace(absl::string_view root,
                                             const NamespaceSpec& spec) override {
    if (absl::Status s = Ask("namespace", std::string(root)); !s.ok()) return s;
    return base_->WriteNamespace(root, spec);
  }
  absl::StatusOr<NamespaceSpec> ReadNamespace(absl::string_view root,
                                              absl::string_view fingerprint) override {
    return base_->ReadNamespace(root, fingerprint);
  }
  std::optional<FileInfo> Stat(const std::string& path) override {
    if (!Ask("probe", path).ok()) return std::nullopt;
    return base_->Stat(path);
  }
  bool ListDirectory(const std::string& dir,
                     const std::function<void(absl::string_view, bool)>& fn) override {
    if (!Ask("scan", dir).ok()) return false;
    return base_->ListDirectory(dir, fn);
  }
  bool Remove(const std::string& path) override { return base_->Remove(path); }
  absl::Status AppendFile(const std::string& path, absl::string_view data) override {
    if (absl::Status s = Ask("journal", path); !s.ok()) return s;
    return base_->AppendFile(path, data);
  }
  absl::StatusOr<std::string> ReadFileRange(const std::string& path, uint64_t offset,
                                            size_t max_bytes) override {
    if (absl::Status s = Ask("journal", path); !s.ok()) return s;
    return base_->ReadFileRange(path, offset, max_bytes);
  }
  void Touch(const std::string& path) override { base_->Touch(path); }
  std::optional<uint64_t> FreeBytes(const std::string& path) override {
    return base_->FreeBytes(path);
  }
  absl::StatusOr<std::string> Quarantine(const std::string& path,
                                         const std::string& root) override {
    return base_->Quarantine(path, root);
  }
  std::unique_ptr<FileLock> TryLock(const std::string& path) override {
    return base_->TryLock(path);
  }
  absl::Status UpdateLockedFile(
      const std::string& path,
      const std::function<std::optional<std::string>(absl::string_view)>& update) override {
    if (absl::Status s = Ask("ledger", path); !s.ok()) return s;
    return base_->UpdateLockedFile(path, update);
  }

 private:
  absl::Status Ask(absl::string_view op, const std::string& path) {
    Hook hook;
    {
      MutexLock lock(&mu_);
      hook = hook_;
    }
    return hook ? hook(op, path) : absl::OkStatus();
  }

  BlockFileSystem* const base_;
  Mutex mu_;
  Hook hook_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> tear_{false};
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_TESTING_FAULT_FILE_SYSTEM_H_
