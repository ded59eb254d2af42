#include "daemon/tiers/object/s3_xml.h"

#include <expat.h>

#include <functional>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvstrata {
namespace {

// Runs expat over `xml`, calling `end(path, text)` at every element's end with the path of
// element names from the root ("ListBucketResult/Contents/Key") and the element's own text.
// The root element must be `root`.
absl::Status Walk(
    absl::string_view xml, absl::string_view root,
    const std::function<void(const std::string& path, const std::string& text)>& end) {
  struct State {
    std::vector<std::string> names;
    std::vector<std::string> texts;
    const std::function<void(const std::string&, const std::string&)>* end;
    std::string root;
    bool bad_root = false;
  } state{{}, {}, &end, std::string(root)};
  XML_Parser parser = XML_ParserCreate("UTF-8");
  if (parser == nullptr) return absl::ResourceExhaustedError("expat: out of memory");
  XML_SetUserData(parser, &state);
  XML_SetElementHandler(
      parser,
      [](void* data, const XML_Char* name, const XML_Char**) {
        auto* s = static_cast<State*>(data);
        if (s->names.empty() && s->root != name) s->bad_root = true;
        s->names.emplace_back(name);
        s->texts.emplace_back();
      },
      [](void* data, const XML_Char*) {
        auto* s = static_cast<State*>(data);
        (*s->end)(absl::StrJoin(s->names, "/"), s->texts.back());
        s->names.pop_back();
        s->texts.pop_back();
      });
  XML_SetCharacterDataHandler(parser, [](void* data, const XML_Char* text, int len) {
    auto* s = static_cast<State*>(data);
    if (!s->texts.empty()) s->texts.back().append(text, static_cast<size_t>(len));
  });
  absl::Status status;
  if (xml.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    status = absl::DataLossError("XML body too large");
  } else if (XML_Parse(parser, xml.data(), static_cast<int>(xml.size()), /*isFinal=*/1) ==
             XML_STATUS_ERROR) {
    status =
        absl::DataLossError(absl::StrCat("malformed XML at line ", XML_GetCurrentLineNumber(parser),
                                         ": ", XML_ErrorString(XML_GetErrorCode(parser))));
  } else if (state.bad_root) {
    status = absl::DataLossError(absl::StrCat("expected a <", root, "> document"));
  }
  XML_ParserFree(parser);
  return status;
}

}  // namespace

absl::StatusOr<S3ListPage> ParseListObjectsV2(absl::string_view xml) {
  S3ListPage page;
  S3Object current;
  bool has_key = false, has_size = false, bad = false;
  std::string why;
  absl::Status s =
      Walk(xml, "ListBucketResult", [&](const std::string& path, const std::string& text) {
        if (path == "ListBucketResult/Contents/Key") {
          current.key = text;
          has_key = !text.empty();
        } else if (path == "ListBucketResult/Contents/Size") {
          has_size = absl::SimpleAtoi(text, &current.size);
        } else if (path == "ListBucketResult/Contents/LastModified") {
          std::string err;
          if (!absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", text, &current.last_modified, &err) &&
              !absl::ParseTime(absl::RFC3339_full, text, &current.last_modified, &err)) {
            bad = true;
            why = absl::StrCat("LastModified '", text, "' is not a time");
          }
        } else if (path == "ListBucketResult/Contents") {
          if (!has_key || !has_size) {
            bad = true;
            why = "a <Contents> without a <Key> or a numeric <Size>";
          }
          page.objects.push_back(std::move(current));
          current = S3Object{};
          has_key = has_size = false;
        } else if (path == "ListBucketResult/IsTruncated") {
          page.truncated = text == "true";
        } else if (path == "ListBucketResult/NextContinuationToken") {
          page.next_token = text;
        }
      });
  if (!s.ok()) return s;
  if (bad) return absl::DataLossError(why);
  if (page.truncated && page.next_token.empty()) {
    return absl::DataLossError("a truncated page without a NextContinuationToken");
  }
  return page;
}

absl::StatusOr<S3Error> ParseS3Error(absl::string_view xml) {
  S3Error error;
  absl::Status s = Walk(xml, "Error", [&](const std::string& path, const std::string& text) {
    if (path == "Error/Code") error.code = text;
    if (path == "Error/Message") error.message = text;
  });
  if (!s.ok()) return s;
  if (error.code.empty()) return absl::DataLossError("an <Error> without a <Code>");
  return error;
}

}  // namespace kvstrata
