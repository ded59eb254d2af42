#include "daemon/tiers/flat_json.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvstrata {
namespace {

void AppendQuoted(std::string& out, absl::string_view text) {
  out.push_back('"');
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}
  absl::StatusOr<FlatJsonObject> ParseObject();

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("namespace JSON: ", what, " at ", pos_));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::StatusOr<std::string> ParseString();
  absl::StatusOr<FlatJsonValue> ParseValue();
  absl::Status ParseEscape(std::string& out);

  absl::string_view text_;
  size_t pos_ = 0;
};

absl::Status Parser::ParseEscape(std::string& out) {
  if (pos_ >= text_.size()) return Error("unterminated escape");
  const char c = text_[pos_++];
  switch (c) {
    case '"':
    case '\\':
    case '/':
      out.push_back(c);
      return absl::OkStatus();
    case 'n':
      out.push_back('\n');
      return absl::OkStatus();
    case 't':
      out.push_back('\t');
      return absl::OkStatus();
    case 'u': {
      uint32_t code = 0;
      if (pos_ + 4 > text_.size() || !absl::SimpleHexAtoi(text_.substr(pos_, 4), &code) ||
          code >= 0x80) {
        return Error("unsupported \\u escape (ASCII only)");
      }
      pos_ += 4;
      out.push_back(static_cast<char>(code));
      return absl::OkStatus();
    }
    default:
      return Error("unsupported escape");
  }
}

absl::StatusOr<std::string> Parser::ParseString() {
  if (!Consume('"')) return Error("expected a string");
  std::string out;
  while (pos_ < text_.size()) {
    const char c = text_[pos_++];
    if (c == '"') return out;
    if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (absl::Status s = ParseEscape(out); !s.ok()) return s;
  }
  return Error("unterminated string");
}

absl::StatusOr<FlatJsonValue> Parser::ParseValue() {
  SkipSpace();
  if (pos_ < text_.size() && text_[pos_] == '"') {
    absl::StatusOr<std::string> s = ParseString();
    if (!s.ok()) return s.status();
    return FlatJsonValue(*std::move(s));
  }
  const size_t begin = pos_;
  while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  uint64_t value = 0;
  const absl::string_view digits = text_.substr(begin, pos_ - begin);
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0') ||
      !absl::SimpleAtoi(digits, &value)) {
    return Error("expected a string or an unsigned integer");
  }
  return FlatJsonValue(value);
}

absl::StatusOr<FlatJsonObject> Parser::ParseObject() {
  FlatJsonObject object;
  if (!Consume('{')) return Error("expected '{'");
  if (!Consume('}')) {
    do {
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      if (!Consume(':')) return Error("expected ':'");
      absl::StatusOr<FlatJsonValue> value = ParseValue();
      if (!value.ok()) return value.status();
      if (!object.emplace(*key, *std::move(value)).second) return Error("duplicate key");
    } while (Consume(','));
    if (!Consume('}')) return Error("expected ',' or '}'");
  }
  SkipSpace();
  if (pos_ != text_.size()) return Error("trailing characters");
  return object;
}

}  // namespace

void FlatJsonWriter::AddKey(absl::string_view key) {
  out_ += first_ ? "\n  " : ",\n  ";
  first_ = false;
  AppendQuoted(out_, key);
  out_ += ": ";
}

void FlatJsonWriter::Add(absl::string_view key, absl::string_view value) {
  AddKey(key);
  AppendQuoted(out_, value);
}

void FlatJsonWriter::Add(absl::string_view key, uint64_t value) {
  AddKey(key);
  absl::StrAppend(&out_, value);
}

std::string FlatJsonWriter::Finish() { return out_ + "\n}\n"; }

absl::StatusOr<FlatJsonObject> ParseFlatJson(absl::string_view text) {
  return Parser(text).ParseObject();
}

}  // namespace kvstrata
