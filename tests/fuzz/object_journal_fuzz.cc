// libFuzzer target: what an object tier reads of the other daemons' journals (daemon/tiers/
// object/object_journal.h) on any text: an object's name and its lines. A name that parses
// has a 13-digit time and a holder of [A-Za-z0-9._-]; each line read names a block object
// under the tier's prefix and nowhere else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/object/object_journal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  int64_t ms = -1;
  std::string holder;
  if (kvstrata::ObjectJournal::ParseName(text.substr(0, text.find('\n')), &ms, &holder)) {
    if (ms < 0 || ms > 9'999'999'999'999 || holder.empty()) __builtin_trap();
    for (char c : holder) {
      if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') __builtin_trap();
    }
  }
  kvstrata::ObjectJournal::ParseText(text, [&](const kvstrata::JournalEntry& e) {
    absl::StatusOr<std::string> name = kvstrata::BlockFilePath("p/q", e.fingerprint, e.key);
    if (!name.ok() || !absl::StartsWith(*name, absl::StrCat("p/q/", e.fingerprint, "/")) ||
        absl::StrContains(*name, "..") || !absl::EndsWith(*name, ".kv") ||
        (e.removed && e.file_bytes != 0)) {
      __builtin_trap();
    }
  });
  return 0;
}
