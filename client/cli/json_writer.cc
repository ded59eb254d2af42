#include "client/cli/json_writer.h"

#include <google/protobuf/descriptor.h>

#include <charconv>
#include <cmath>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvstrata {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void AppendString(std::string& out, const std::string& text) {
  out += '"';
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void AppendDouble(std::string& out, double value) {
  if (std::isnan(value)) return out.append("\"NaN\""), void();
  if (std::isinf(value)) return out.append(value > 0 ? "\"Infinity\"" : "\"-Infinity\""), void();
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, error == std::errc() ? end : buffer);
}

void AppendMessage(std::string& out, const Message& message, int depth);

// One value of `field`: element `index` of a repeated field, or the singular value (-1).
void AppendValue(std::string& out, const Message& m, const FieldDescriptor* f, int index,
                 int depth) {
  const Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrAppend(&out, rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrAppend(&out, rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrAppend(&out, rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrAppend(&out, rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return AppendDouble(out, rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return AppendDouble(out, rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      out += (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false";
      return;
    case FieldDescriptor::CPPTYPE_ENUM:
      return AppendString(out, (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name());
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string text = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
      return AppendString(
          out, f->type() == FieldDescriptor::TYPE_BYTES ? absl::Base64Escape(text) : text);
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return AppendMessage(out, rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f),
                           depth);
  }
}

void Indent(std::string& out, int depth) { out.append(2 * depth, ' '); }

void AppendField(std::string& out, const Message& m, const FieldDescriptor* f, int depth) {
  const int size = f->is_repeated() ? m.GetReflection()->FieldSize(m, f) : 0;
  if (f->is_map()) {  // entries {key, value} as one object
    out += '{';
    for (int i = 0; i < size; ++i) {
      const Message& entry = m.GetReflection()->GetRepeatedMessage(m, f, i);
      const FieldDescriptor* key = entry.GetDescriptor()->map_key();
      out += i == 0 ? "\n" : ",\n";
      Indent(out, depth + 1);
      std::string key_text;
      AppendValue(key_text, entry, key, -1, depth + 1);
      if (key_text.front() != '"') key_text = absl::StrCat("\"", key_text, "\"");
      absl::StrAppend(&out, key_text, ": ");
      AppendValue(out, entry, entry.GetDescriptor()->map_value(), -1, depth + 1);
    }
    if (size > 0) out += '\n', Indent(out, depth);
    out += '}';
  } else if (f->is_repeated()) {
    out += '[';
    for (int i = 0; i < size; ++i) {
      out += i == 0 ? "\n" : ",\n";
      Indent(out, depth + 1);
      AppendValue(out, m, f, i, depth + 1);
    }
    if (size > 0) out += '\n', Indent(out, depth);
    out += ']';
  } else {
    AppendValue(out, m, f, -1, depth);
  }
}

void AppendMessage(std::string& out, const Message& message, int depth) {
  const google::protobuf::Descriptor* d = message.GetDescriptor();
  const Reflection* r = message.GetReflection();
  out += '{';
  bool first = true;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    // Like the proto3 mapping with defaults printed: an unset message, oneof member or
    // `optional` field is left out; every other field is printed.
    if (!f->is_repeated() && f->has_presence() && !r->HasField(message, f)) continue;
    out += first ? "\n" : ",\n";
    first = false;
    Indent(out, depth + 1);
    AppendString(out, f->name());
    out += ": ";
    AppendField(out, message, f, depth + 1);
  }
  if (!first) out += '\n', Indent(out, depth);
  out += '}';
}

}  // namespace

std::string MessageToJson(const google::protobuf::Message& message) {
  std::string out;
  AppendMessage(out, message, 0);
  return out;
}

}  // namespace kvstrata
