#include "daemon/tiers/namespace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_file_io.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/flat_json.h"

namespace kvstrata {
namespace {

// Reads fields out of a parsed object, remembering the first problem.
class FieldReader {
 public:
  explicit FieldReader(const FlatJsonObject& object) : object_(object) {}

  std::string String(absl::string_view key) {
    const std::string* value = Find<std::string>(key);
    return value == nullptr ? std::string() : *value;
  }
  uint64_t U64(absl::string_view key) {
    const uint64_t* value = Find<uint64_t>(key);
    return value == nullptr ? 0 : *value;
  }
  uint32_t U32(absl::string_view key) {
    const uint64_t value = U64(key);
    if (value > UINT32_MAX) Fail(absl::StrCat("field ", key, " out of range"));
    return static_cast<uint32_t>(value);
  }
  bool Has(absl::string_view key) const { return object_.contains(key); }
  const absl::Status& status() const { return status_; }

 private:
  template <typename T>
  const T* Find(absl::string_view key) {
    auto it = object_.find(key);
    if (it == object_.end()) {
      Fail(absl::StrCat("missing field ", key));
      return nullptr;
    }
    const T* value = std::get_if<T>(&it->second);
    if (value == nullptr) Fail(absl::StrCat("field ", key, " has the wrong type"));
    return value;
  }
  void Fail(std::string message) {
    if (status_.ok()) status_ = absl::InvalidArgumentError("namespace JSON: " + message);
  }

  const FlatJsonObject& object_;
  absl::Status status_;
};

NamespaceSpec SpecFromFields(FieldReader& r) {
  NamespaceSpec spec;
  spec.engine_kind = static_cast<EngineKind>(r.U32("engine_kind"));
  spec.model = r.String("model");
  spec.dtype = static_cast<DType>(r.U32("dtype"));
  spec.num_layers = r.U32("num_layers");
  spec.num_kv_heads = r.U32("num_kv_heads");
  spec.head_size = r.U32("head_size");
  spec.tokens_per_block = r.U32("tokens_per_block");
  spec.tp_size = r.U32("tp_size");
  spec.tp_rank = r.U32("tp_rank");
  spec.pp_size = r.U32("pp_size");
  spec.pp_rank = r.U32("pp_rank");
  spec.kv_layout = static_cast<KvLayout>(r.U32("kv_layout"));
  spec.attention_kind = static_cast<AttentionKind>(r.U32("attention_kind"));
  spec.salt = r.String("salt");
  spec.opaque_block_bytes = r.U64("opaque_block_bytes");
  if (r.Has("scope")) spec.scope = r.String("scope");
  return spec;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", ::gettid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", tmp));
  bool direct = false;
  absl::Status status = internal::WriteFullyAt(fd, contents.data(), contents.size(), 0, &direct);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoToStatus(errno, "fsync");
  if (::close(fd) != 0 && status.ok()) status = ErrnoToStatus(errno, "close");
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoToStatus(errno, absl::StrCat("rename to ", path));
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

}  // namespace

std::string NamespaceToJson(const NamespaceSpec& spec) {
  FlatJsonWriter w;
  w.Add("format", kNamespaceFileFormat);
  w.Add("format_version", kNamespaceFileVersion);
  w.Add("block_file_format_version", kBlockFileFormatVersion);
  w.Add("fingerprint", Fingerprint(spec));
  w.Add("engine_kind", static_cast<uint64_t>(spec.engine_kind));
  w.Add("model", spec.model);
  w.Add("dtype", static_cast<uint64_t>(spec.dtype));
  w.Add("num_layers", spec.num_layers);
  w.Add("num_kv_heads", spec.num_kv_heads);
  w.Add("head_size", spec.head_size);
  w.Add("tokens_per_block", spec.tokens_per_block);
  w.Add("tp_size", spec.tp_size);
  w.Add("tp_rank", spec.tp_rank);
  w.Add("pp_size", spec.pp_size);
  w.Add("pp_rank", spec.pp_rank);
  w.Add("kv_layout", static_cast<uint64_t>(spec.kv_layout));
  w.Add("attention_kind", static_cast<uint64_t>(spec.attention_kind));
  w.Add("salt", spec.salt);
  w.Add("opaque_block_bytes", spec.opaque_block_bytes);
  if (!spec.scope.empty()) w.Add("scope", spec.scope);  // the tenant (multi-tenant daemons)
  return w.Finish();
}

absl::StatusOr<NamespaceSpec> NamespaceFromJson(absl::string_view json) {
  absl::StatusOr<FlatJsonObject> object = ParseFlatJson(json);
  if (!object.ok()) return object.status();
  FieldReader r(*object);
  const std::string format = r.String("format");
  const uint64_t version = r.U64("format_version");
  const uint64_t block_version = r.U64("block_file_format_version");
  const std::string fingerprint = r.String("fingerprint");
  NamespaceSpec spec = SpecFromFields(r);
  if (!r.status().ok()) return r.status();
  if (format != kNamespaceFileFormat || version != kNamespaceFileVersion ||
      block_version != kBlockFileFormatVersion) {
    return absl::InvalidArgumentError("namespace JSON: unknown format or version");
  }
  if (absl::Status s = ValidateAndNormalize(spec); !s.ok()) {
    return absl::DataLossError(absl::StrCat("namespace JSON: ", s.message()));
  }
  if (Fingerprint(spec) != fingerprint) {
    return absl::DataLossError("namespace JSON: fingerprint does not match the spec");
  }
  return spec;
}

absl::StatusOr<std::string> WriteNamespaceFile(absl::string_view root, NamespaceSpec spec) {
  if (absl::Status s = ValidateAndNormalize(spec); !s.ok()) return s;
  const std::string fingerprint = Fingerprint(spec);
  absl::StatusOr<std::string> dir = NamespaceDir(root, fingerprint);
  if (!dir.ok()) return dir.status();
  if (absl::Status s = MakeDirectories(*dir); !s.ok()) return s;
  absl::Status s =
      WriteFileAtomically(absl::StrCat(*dir, "/", kNamespaceFileName), NamespaceToJson(spec));
  if (!s.ok()) return s;
  return fingerprint;
}

absl::StatusOr<NamespaceSpec> ReadNamespaceFile(absl::string_view root,
                                                absl::string_view fingerprint) {
  absl::StatusOr<std::string> path = NamespaceFilePath(root, fingerprint);
  if (!path.ok()) return path.status();
  std::ifstream in(*path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(*path, " not found"));
  std::ostringstream contents;
  contents << in.rdbuf();
  absl::StatusOr<NamespaceSpec> spec = NamespaceFromJson(contents.str());
  if (!spec.ok()) return absl::DataLossError(absl::StrCat(*path, ": ", spec.status().message()));
  if (Fingerprint(*spec) != fingerprint) {
    return absl::DataLossError(absl::StrCat(*path, " describes another namespace"));
  }
  return spec;
}

}  // namespace kvstrata
