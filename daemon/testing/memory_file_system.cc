#include "daemon/testing/memory_file_system.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/namespace_file.h"

namespace kvstrata {
namespace {

constexpr size_t kLockedFileBytes = 16 << 10;  // UpdateLockedFile's fixed file size

// "//" collapsed, no trailing '/' (but "/" itself).
std::string Normalize(absl::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (char c : path) {
    if (c == '/' && !out.empty() && out.back() == '/') continue;
    out.push_back(c);
  }
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// The directory holding `path` (normalized): "/" for "/x", "" for a name without '/'.
std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The prefix every path inside directory `dir` starts with.
std::string ChildPrefix(const std::string& dir) { return dir == "/" ? dir : dir + "/"; }

BlockReadResult Miss(BlockMiss miss, std::string detail) {
  BlockReadResult result;
  result.miss = miss;
  result.detail = std::move(detail);
  return result;
}

// The checks ReadBlockFileInto makes (block_file_read.cc), on the file's bytes.
BlockReadResult VerifyInto(absl::string_view file, absl::string_view fingerprint,
                           absl::string_view key, absl::Span<char> dest) {
  if (file.size() < kBlockHeaderBytes) {
    if (file.size() >= sizeof(kBlockFileMagic) &&
        std::memcmp(file.data(), kBlockFileMagic, sizeof(kBlockFileMagic)) != 0) {
      return Miss(BlockMiss::kBadHeader, "bad block file magic");
    }
    return Miss(BlockMiss::kTruncated, absl::StrCat("file of ", file.size(), " bytes"));
  }
  absl::StatusOr<BlockHeader> header = DecodeBlockHeader(file.substr(0, kBlockHeaderBytes));
  if (!header.ok()) return Miss(BlockMiss::kBadHeader, std::string(header.status().message()));
  if (FingerprintHex(header->fingerprint) != fingerprint) {
    return Miss(BlockMiss::kWrongNamespace, "block of another namespace");
  }
  if (header->key != key) return Miss(BlockMiss::kWrongKey, "block of another key");
  const uint64_t expected = BlockFileBytes(header->payload_bytes);
  if (file.size() != expected) {
    return Miss(file.size() < expected ? BlockMiss::kTruncated : BlockMiss::kBadHeader,
                absl::StrCat("file has ", file.size(), " bytes, header says ", expected));
  }
  if (header->payload_bytes != dest.size()) {
    return Miss(BlockMiss::kBadHeader, absl::StrCat("payload of ", header->payload_bytes,
                                                    " bytes, expected ", dest.size()));
  }
  const absl::string_view payload = file.substr(kBlockHeaderBytes, dest.size());
  if (!PayloadChecksumOk(*header, payload)) {
    return Miss(BlockMiss::kBadChecksum, "payload checksum mismatch");
  }
  std::memcpy(dest.data(), payload.data(), payload.size());
  BlockReadResult result;
  result.payload_bytes = header->payload_bytes;
  return result;
}

}  // namespace

// Holds a path's lock (TryLock's FileLock, and UpdateLockedFile's while it runs).
class MemoryFileSystem::PathLock final : public FileLock {
 public:
  PathLock(MemoryFileSystem* fs, std::string path) : fs_(fs), path_(std::move(path)) {}
  ~PathLock() override { fs_->UnlockPath(path_); }

 private:
  MemoryFileSystem* const fs_;
  const std::string path_;
};

MemoryFileSystem::MemoryFileSystem(Clock* clock) : clock_(clock) {
  MutexLock lock(&mu_);
  nodes_["/"] = Node{.dir = true, .modified = clock_->Now()};
}

MemoryFileSystem::~MemoryFileSystem() = default;

void MemoryFileSystem::SetCapacity(uint64_t bytes) {
  MutexLock lock(&mu_);
  capacity_bytes_ = bytes;
}

std::optional<std::string> MemoryFileSystem::Contents(const std::string& path) const {
  MutexLock lock(&mu_);
  auto it = nodes_.find(Normalize(path));
  if (it == nodes_.end() || it->second.dir) return std::nullopt;
  return it->second.data;
}

bool MemoryFileSystem::SetContents(const std::string& path, std::string bytes) {
  MutexLock lock(&mu_);
  return PutLocked(Normalize(path), std::move(bytes), /*capacity=*/false).ok();
}

bool MemoryFileSystem::IsDirLocked(const std::string& path) const {
  auto it = nodes_.find(path);
  return it != nodes_.end() && it->second.dir;
}

absl::Status MemoryFileSystem::MakeDirectoriesLocked(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("empty directory path");
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    auto [it, created] = nodes_.try_emplace(prefix, Node{.dir = true, .modified = clock_->Now()});
    if (!it->second.dir) return absl::FailedPreconditionError(prefix + " is not a directory");
  }
  return absl::OkStatus();
}

absl::Status MemoryFileSystem::PutLocked(const std::string& path, std::string bytes,
                                         bool capacity) {
  if (!IsDirLocked(Parent(path))) return absl::NotFoundError("no directory for " + path);
  auto it = nodes_.find(path);
  if (it != nodes_.end() && it->second.dir) {
    return absl::FailedPreconditionError(path + " is a directory");
  }
  const uint64_t others = used_bytes_ - (it != nodes_.end() ? it->second.data.size() : 0);
  if (capacity && others + bytes.size() > capacity_bytes_) {
    return absl::ResourceExhaustedError("write " + path + ": No space left on device");
  }
  Node& node = it != nodes_.end() ? it->second : nodes_[path];
  used_bytes_ = others + bytes.size();
  node.data = std::move(bytes);
  node.modified = clock_->Now();
  return absl::OkStatus();
}

absl::Status MemoryFileSystem::MakeDirectories(const std::string& dir) {
  MutexLock lock(&mu_);
  return MakeDirectoriesLocked(Normalize(dir));
}

absl::StatusOr<BlockWriteInfo> MemoryFileSystem::WriteBlock(const std::string& path,
                                                            const BlockHeader& header,
                                                            absl::string_view payload,
                                                            const BlockWriteOptions&) {
  std::string file = EncodeBlockHeader(header);
  file.append(payload.data(), payload.size());
  file.resize(BlockFileBytes(payload.size()), '\0');
  const std::string p = Normalize(path);
  MutexLock lock(&mu_);
  if (absl::Status s = MakeDirectoriesLocked(Parent(p)); !s.ok()) return s;
  if (absl::Status s = PutLocked(p, std::move(file), /*capacity=*/true); !s.ok()) return s;
  return BlockWriteInfo{};
}

BlockReadResult MemoryFileSystem::ReadBlock(const std::string& path, absl::string_view fingerprint,
                                            absl::string_view key, absl::Span<char> dest) {
  MutexLock lock(&mu_);
  auto it = nodes_.find(Normalize(path));
  if (it == nodes_.end()) return Miss(BlockMiss::kAbsent, "open: No such file or directory");
  if (it->second.dir) return Miss(BlockMiss::kBadHeader, "not a regular file");
  return VerifyInto(it->second.data, fingerprint, key, dest);
}

absl::StatusOr<std::string> MemoryFileSystem::WriteNamespace(absl::string_view root,
                                                             const NamespaceSpec& spec) {
  NamespaceSpec normalized = spec;
  if (absl::Status s = ValidateAndNormalize(normalized); !s.ok()) return s;
  std::string fingerprint = Fingerprint(normalized);
  absl::StatusOr<std::string> dir = NamespaceDir(root, fingerprint);
  if (!dir.ok()) return dir.status();
  const std::string d = Normalize(*dir);
  MutexLock lock(&mu_);
  if (absl::Status s = MakeDirectoriesLocked(d); !s.ok()) return s;
  absl::Status s = PutLocked(absl::StrCat(d, "/", kNamespaceFileName), NamespaceToJson(normalized),
                             /*capacity=*/true);
  if (!s.ok()) return s;
  return fingerprint;
}

absl::StatusOr<NamespaceSpec> MemoryFileSystem::ReadNamespace(absl::string_view root,
                                                              absl::string_view fingerprint) {
  absl::StatusOr<std::string> path = NamespaceFilePath(root, fingerprint);
  if (!path.ok()) return path.status();
  std::optional<std::string> json = Contents(*path);
  if (!json.has_value()) return absl::NotFoundError(absl::StrCat(*path, " not found"));
  absl::StatusOr<NamespaceSpec> spec = NamespaceFromJson(*json);
  if (!spec.ok()) return absl::DataLossError(absl::StrCat(*path, ": ", spec.status().message()));
  if (Fingerprint(*spec) != fingerprint) {
    return absl::DataLossError(absl::StrCat(*path, " describes another namespace"));
  }
  return spec;
}

std::optional<FileInfo> MemoryFileSystem::Stat(const std::string& path) {
  MutexLock lock(&mu_);
  auto it = nodes_.find(Normalize(path));
  if (it == nodes_.end()) return std::nullopt;
  return FileInfo{it->second.data.size(), it->second.modified, !it->second.dir};
}

bool MemoryFileSystem::ListDirectory(const std::string& dir,
                                     const std::function<void(absl::string_view, bool)>& fn) {
  std::vector<std::pair<std::string, bool>> entries;
  {
    MutexLock lock(&mu_);
    const std::string d = Normalize(dir);
    if (!IsDirLocked(d)) return false;
    const std::string prefix = ChildPrefix(d);
    for (auto it = nodes_.upper_bound(prefix);
         it != nodes_.end() && absl::StartsWith(it->first, prefix); ++it) {
      absl::string_view name = absl::string_view(it->first).substr(prefix.size());
      if (name.find('/') == absl::string_view::npos) entries.emplace_back(name, it->second.dir);
    }
  }
  for (const auto& [name, is_dir] : entries) fn(name, is_dir);
  return true;
}

bool MemoryFileSystem::Remove(const std::string& path) {
  MutexLock lock(&mu_);
  auto it = nodes_.find(Normalize(path));
  if (it == nodes_.end() || it->second.dir) return false;
  used_bytes_ -= it->second.data.size();
  nodes_.erase(it);
  return true;
}

absl::Status MemoryFileSystem::AppendFile(const std::string& path, absl::string_view data) {
  MutexLock lock(&mu_);
  const std::string p = Normalize(path);
  auto it = nodes_.find(p);
  std::string bytes = it != nodes_.end() ? it->second.data : std::string();
  bytes.append(data.data(), data.size());
  return PutLocked(p, std::move(bytes), /*capacity=*/true);
}

absl::StatusOr<std::string> MemoryFileSystem::ReadFileRange(const std::string& path,
                                                            uint64_t offset, size_t max_bytes) {
  MutexLock lock(&mu_);
  auto it = nodes_.find(Normalize(path));
  if (it == nodes_.end()) return absl::NotFoundError("no file " + path);
  if (it->second.dir) return absl::FailedPreconditionError(path + " is a directory");
  const std::string& data = it->second.data;
  if (offset >= data.size()) return std::string();
  return data.substr(static_cast<size_t>(offset), max_bytes);
}

void MemoryFileSystem::Touch(const std::string& path) {
  MutexLock lock(&mu_);
  auto it = nodes_.find(Normalize(path));
  if (it != nodes_.end()) it->second.modified = clock_->Now();
}

std::optional<uint64_t> MemoryFileSystem::FreeBytes(const std::string& path) {
  MutexLock lock(&mu_);
  if (!nodes_.contains(Normalize(path))) return std::nullopt;
  return capacity_bytes_ > used_bytes_ ? capacity_bytes_ - used_bytes_ : 0;
}

absl::StatusOr<std::string> MemoryFileSystem::Quarantine(const std::string& path,
                                                         const std::string& root) {
  const std::string base = Normalize(root), p = Normalize(path);
  if (base.empty() || p.size() <= base.size() + 1 || !absl::StartsWith(p, base) ||
      p[base.size()] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not under ", root));
  }
  const std::string dir = absl::StrCat(base, "/", kQuarantineDirName);
  MutexLock lock(&mu_);
  if (absl::Status s = MakeDirectoriesLocked(dir); !s.ok()) return s;
  auto it = nodes_.find(p);
  if (it == nodes_.end()) return absl::NotFoundError(absl::StrCat("quarantine ", path));
  if (it->second.dir) return absl::FailedPreconditionError(path + " is a directory");
  const std::string target = absl::StrCat(
      dir, "/", absl::StrReplaceAll(p.substr(base.size() + 1), {{"/", "%"}}), ".",
      absl::ToUnixMillis(clock_->Now()), ".", absl::Hex(++quarantined_, absl::kZeroPad16));
  nodes_[target] = std::move(it->second);
  nodes_.erase(p);
  return target;
}

std::unique_ptr<FileLock> MemoryFileSystem::TryLock(const std::string& path) {
  const std::string p = Normalize(path);
  {
    MutexLock lock(&mu_);
    if (!nodes_.contains(p) && !PutLocked(p, "", /*capacity=*/false).ok()) return nullptr;
    if (IsDirLocked(p)) return nullptr;
  }
  if (!TryLockPath(p)) return nullptr;
  return std::make_unique<PathLock>(this, p);
}

absl::Status MemoryFileSystem::UpdateLockedFile(
    const std::string& path,
    const std::function<std::optional<std::string>(absl::string_view)>& update) {
  const std::string p = Normalize(path);
  {
    MutexLock lock(&mu_);
    if (!nodes_.contains(p) && !PutLocked(p, "", /*capacity=*/false).ok()) {
      return absl::NotFoundError("open " + path);
    }
    if (IsDirLocked(p)) return absl::FailedPreconditionError("open " + path + ": a directory");
  }
  LockPath(p);
  PathLock held(this, p);
  std::string current;
  {
    MutexLock lock(&mu_);
    auto it = nodes_.find(p);
    if (it != nodes_.end() && !it->second.dir) current = it->second.data;
  }
  if (current.size() > kLockedFileBytes) return absl::OutOfRangeError(path + " is over 16 KiB");
  while (!current.empty() && current.back() == '\0') current.pop_back();
  std::optional<std::string> next = update(current);
  if (!next.has_value()) return absl::OkStatus();
  if (next->size() > kLockedFileBytes) return absl::OutOfRangeError("new contents over 16 KiB");
  next->resize(kLockedFileBytes, '\0');
  MutexLock lock(&mu_);
  return PutLocked(p, *std::move(next), /*capacity=*/false);
}

bool MemoryFileSystem::TryLockPath(const std::string& path) {
  MutexLock lock(&mu_);
  return locked_.insert(path).second;
}

void MemoryFileSystem::LockPath(const std::string& path) {
  while (true) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> wait(wait_mu_);
      seen = unlocks_;
    }
    if (TryLockPath(path)) return;
    std::unique_lock<std::mutex> wait(wait_mu_);
    unlocked_.wait(wait, [&] { return unlocks_ != seen; });
  }
}

void MemoryFileSystem::UnlockPath(const std::string& path) {
  {
    MutexLock lock(&mu_);
    locked_.erase(path);
  }
  {
    std::lock_guard<std::mutex> wait(wait_mu_);
    ++unlocks_;
  }
  unlocked_.notify_all();
}

}  // namespace kvstrata
