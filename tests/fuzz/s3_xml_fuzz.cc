// libFuzzer target: the S3 bodies an object tier parses (daemon/tiers/object/s3_xml.h) on any
// bytes: a ListObjectsV2 page and an error body, both from the same input. A page that parses
// names objects with keys, and a truncated one the token to go on with; neither parser reads
// past the input or crashes on malformed XML, entities (expat bounds their expansion) or
// deep nesting.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "daemon/tiers/object/s3_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view xml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<kvstrata::S3ListPage> page = kvstrata::ParseListObjectsV2(xml);
  if (page.ok()) {
    if (page->truncated && page->next_token.empty()) __builtin_trap();
    for (const kvstrata::S3Object& o : page->objects) {
      if (o.key.empty()) __builtin_trap();
    }
  }
  (void)kvstrata::ParseS3Error(xml);
  return 0;
}
