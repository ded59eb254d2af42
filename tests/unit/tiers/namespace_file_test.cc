#include "daemon/tiers/namespace_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "daemon/tiers/block_file_io.h"
#include "daemon/tiers/block_path.h"
#include "tests/unit/namespaces/test_specs.h"

namespace kvstrata {
namespace {

// Llama-3.1-8B, with a model name and salt that need JSON escaping.
NamespaceSpec Spec() {
  NamespaceSpec spec = Llama8bSpec();
  spec.model = "meta-llama/Llama-3.1-8B \"quoted\"\n";
  spec.attention_kind = AttentionKind::kMha;
  spec.salt = "tenant\\a";
  return spec;
}

std::string Root(absl::string_view name) {
  return ::testing::TempDir() + "/kvstrata_ns_" + std::string(name);
}

TEST(NamespaceFileTest, WritesAndReadsBackTheSpec) {
  const std::string root = Root("roundtrip");
  absl::StatusOr<std::string> fingerprint = WriteNamespaceFile(root, Spec());
  ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
  absl::StatusOr<NamespaceSpec> read = ReadNamespaceFile(root, *fingerprint);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->model, Spec().model);
  EXPECT_EQ(read->salt, Spec().salt);
  EXPECT_EQ(Fingerprint(*read), *fingerprint);
  // Rewriting (another daemon registering the same namespace) is harmless.
  ASSERT_TRUE(WriteNamespaceFile(root, Spec()).ok());
  EXPECT_EQ(ReadNamespaceFile(root, "ffffffffffffffffffffffffffffffff").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(NamespaceFileTest, KeepsAHybridEnginesKvGroup) {
  const std::string root = Root("kv_group");
  NamespaceSpec spec = Spec();
  spec.kv_group = "1/2:sliding_window=128";
  absl::StatusOr<std::string> fingerprint = WriteNamespaceFile(root, spec);
  ASSERT_TRUE(fingerprint.ok()) << fingerprint.status();
  absl::StatusOr<NamespaceSpec> read = ReadNamespaceFile(root, *fingerprint);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->kv_group, spec.kv_group);
  EXPECT_EQ(Fingerprint(*read), *fingerprint);
}

TEST(NamespaceFileTest, RejectsAnInvalidSpec) {
  NamespaceSpec spec = Spec();
  spec.num_layers = 0;
  EXPECT_EQ(WriteNamespaceFile(Root("invalid"), spec).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NamespaceFileTest, ReadsTheOneLineFilesOfEarlierDaemons) {
  // What daemons before the protobuf JSON mapping wrote (a hand-written writer, one line).
  NamespaceSpec spec = Spec();
  ASSERT_TRUE(ValidateAndNormalize(spec).ok());
  const std::string old = absl::StrCat(
      "{\"format\": \"kvstrata-namespace\", \"format_version\": 1, \"block_file_format_version\": "
      "1, "
      "\"fingerprint\": \"",
      Fingerprint(spec), "\", \"engine_kind\": ", static_cast<int>(spec.engine_kind),
      ", \"model\": \"meta-llama/Llama-3.1-8B \\\"quoted\\\"\\n\", \"dtype\": ",
      static_cast<int>(spec.dtype), ", \"num_layers\": ", spec.num_layers,
      ", \"num_kv_heads\": ", spec.num_kv_heads, ", \"head_size\": ", spec.head_size,
      ", \"tokens_per_block\": ", spec.tokens_per_block, ", \"tp_size\": ", spec.tp_size,
      ", \"tp_rank\": ", spec.tp_rank, ", \"pp_size\": ", spec.pp_size,
      ", \"pp_rank\": ", spec.pp_rank, ", \"kv_layout\": ", static_cast<int>(spec.kv_layout),
      ", \"attention_kind\": ", static_cast<int>(spec.attention_kind),
      ", \"salt\": \"tenant\\\\a\", \"opaque_block_bytes\": 0}");
  absl::StatusOr<NamespaceSpec> read = NamespaceFromJson(old);
  ASSERT_TRUE(read.ok()) << read.status() << "\n" << old;
  EXPECT_EQ(read->model, spec.model);
  EXPECT_EQ(read->salt, spec.salt);
  EXPECT_EQ(Fingerprint(*read), Fingerprint(spec));
}

TEST(NamespaceFileTest, ReadingValidatesTheContents) {
  NamespaceSpec spec = Spec();
  ASSERT_TRUE(ValidateAndNormalize(spec).ok());
  const std::string json = NamespaceToJson(spec);
  ASSERT_TRUE(NamespaceFromJson(json).ok());
  const std::string bad[] = {
      "",
      "[]",
      "{\"format\": \"kvstrata-namespace\"}",  // Missing fields.
      absl::StrReplaceAll(json, {{"\"num_layers\": 32", "\"num_layers\": \"many\""}}),  // Type.
      absl::StrReplaceAll(json, {{"\"num_layers\": 32", "\"num_layers\": true"}}),      // Type.
      absl::StrReplaceAll(json, {{"\"num_layers\": 32", "\"num_layers\": -32"}}),       // Sign.
      absl::StrReplaceAll(json, {{"\"num_layers\": 32", "\"num_layers\": 31"}}),  // Fingerprint.
      absl::StrReplaceAll(json, {{"\"num_layers\": 32", "\"num_layers\": 0"}}),   // Invalid.
      absl::StrReplaceAll(json, {{"\"format_version\": 1", "\"format_version\": 9"}}),
      absl::StrReplaceAll(json, {{"\"dtype\"", "\"model\""}}),  // Duplicate key.
      json + "x",
      json.substr(0, json.size() / 2),
  };
  for (const std::string& text : bad) EXPECT_FALSE(NamespaceFromJson(text).ok()) << text;
}

TEST(NamespaceFileTest, AFileInTheWrongDirectoryIsDataLoss) {
  const std::string root = Root("moved");
  absl::StatusOr<std::string> fingerprint = WriteNamespaceFile(root, Spec());
  ASSERT_TRUE(fingerprint.ok());
  const std::string other = "00000000000000000000000000000001";
  std::ifstream in(*NamespaceFilePath(root, *fingerprint));
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(MakeDirectories(*NamespaceDir(root, other)).ok());
  std::ofstream(*NamespaceFilePath(root, other)) << contents;
  EXPECT_EQ(ReadNamespaceFile(root, other).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvstrata
