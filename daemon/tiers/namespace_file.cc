#include "daemon/tiers/namespace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/tiers/block_file_format.h"
#include "daemon/tiers/block_file_io.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/namespace_file.pb.h"
#include "google/protobuf/util/json_util.h"

namespace kvstrata {
namespace {

using storage::NamespaceFile;

// The spec in `file`, or INVALID_ARGUMENT naming the first field missing.
absl::StatusOr<NamespaceSpec> SpecFromFile(const NamespaceFile& f) {
  const std::pair<bool, absl::string_view> required[] = {
      {f.has_engine_kind(), "engine_kind"},
      {f.has_model(), "model"},
      {f.has_dtype(), "dtype"},
      {f.has_num_layers(), "num_layers"},
      {f.has_num_kv_heads(), "num_kv_heads"},
      {f.has_head_size(), "head_size"},
      {f.has_tokens_per_block(), "tokens_per_block"},
      {f.has_tp_size(), "tp_size"},
      {f.has_tp_rank(), "tp_rank"},
      {f.has_pp_size(), "pp_size"},
      {f.has_pp_rank(), "pp_rank"},
      {f.has_kv_layout(), "kv_layout"},
      {f.has_attention_kind(), "attention_kind"},
      {f.has_salt(), "salt"},
      {f.has_opaque_block_bytes(), "opaque_block_bytes"},
  };
  for (const auto& [present, name] : required) {
    if (!present)
      return absl::InvalidArgumentError(absl::StrCat("namespace JSON: missing field ", name));
  }
  NamespaceSpec spec;
  spec.engine_kind = static_cast<EngineKind>(f.engine_kind());
  spec.model = f.model();
  spec.dtype = static_cast<DType>(f.dtype());
  spec.num_layers = f.num_layers();
  spec.num_kv_heads = f.num_kv_heads();
  spec.head_size = f.head_size();
  spec.tokens_per_block = f.tokens_per_block();
  spec.tp_size = f.tp_size();
  spec.tp_rank = f.tp_rank();
  spec.pp_size = f.pp_size();
  spec.pp_rank = f.pp_rank();
  spec.kv_layout = static_cast<KvLayout>(f.kv_layout());
  spec.attention_kind = static_cast<AttentionKind>(f.attention_kind());
  spec.salt = f.salt();
  spec.opaque_block_bytes = f.opaque_block_bytes();
  spec.scope = f.scope();
  spec.kv_group = f.kv_group();
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
  NamespaceFile f;
  f.set_format(std::string(kNamespaceFileFormat));
  f.set_format_version(kNamespaceFileVersion);
  f.set_block_file_format_version(kBlockFileFormatVersion);
  f.set_fingerprint(Fingerprint(spec));
  f.set_engine_kind(static_cast<uint32_t>(spec.engine_kind));
  f.set_model(spec.model);
  f.set_dtype(static_cast<uint32_t>(spec.dtype));
  f.set_num_layers(spec.num_layers);
  f.set_num_kv_heads(spec.num_kv_heads);
  f.set_head_size(spec.head_size);
  f.set_tokens_per_block(spec.tokens_per_block);
  f.set_tp_size(spec.tp_size);
  f.set_tp_rank(spec.tp_rank);
  f.set_pp_size(spec.pp_size);
  f.set_pp_rank(spec.pp_rank);
  f.set_kv_layout(static_cast<uint32_t>(spec.kv_layout));
  f.set_attention_kind(static_cast<uint32_t>(spec.attention_kind));
  f.set_salt(spec.salt);
  // ValidateAndNormalize caps it at 1 GiB.
  f.set_opaque_block_bytes(static_cast<uint32_t>(spec.opaque_block_bytes));
  if (!spec.scope.empty()) f.set_scope(spec.scope);  // the tenant (multi-tenant daemons)
  if (!spec.kv_group.empty()) f.set_kv_group(spec.kv_group);
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(f, &json, options);  // Cannot fail.
  return json;
}

absl::StatusOr<NamespaceSpec> NamespaceFromJson(absl::string_view json) {
  NamespaceFile f;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (auto parsed = google::protobuf::util::JsonStringToMessage(
          google::protobuf::StringPiece(json.data(), json.size()), &f, options);
      !parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace JSON: ", std::string(parsed.message())));
  }
  if (!f.has_format() || !f.has_format_version() || !f.has_block_file_format_version() ||
      !f.has_fingerprint()) {
    return absl::InvalidArgumentError(
        "namespace JSON: missing format, format_version, block_file_format_version or "
        "fingerprint");
  }
  absl::StatusOr<NamespaceSpec> spec = SpecFromFile(f);
  if (!spec.ok()) return spec.status();
  if (f.format() != kNamespaceFileFormat || f.format_version() != kNamespaceFileVersion ||
      f.block_file_format_version() != kBlockFileFormatVersion) {
    return absl::InvalidArgumentError("namespace JSON: unknown format or version");
  }
  if (absl::Status s = ValidateAndNormalize(*spec); !s.ok()) {
    return absl::DataLossError(absl::StrCat("namespace JSON: ", s.message()));
  }
  if (Fingerprint(*spec) != f.fingerprint()) {
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
