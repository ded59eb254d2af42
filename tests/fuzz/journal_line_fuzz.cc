// libFuzzer target: one line of an L3 write journal (daemon/tiers/write_journal.h) on any
// text (either kind: written/used or removed). A line that parses names a block file under
// the tier's root and nowhere else (no "..", no other directory), and the entry written back
// parses to the same entry.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/tiers/block_path.h"
#include "daemon/tiers/write_journal.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view line(reinterpret_cast<const char*>(data), size);
  kvstrata::JournalEntry entry;
  if (!kvstrata::WriteJournal::ParseLine(line, &entry)) return 0;
  absl::StatusOr<std::string> path = kvstrata::BlockFilePath("/root", entry.fingerprint, entry.key);
  if (!path.ok() || !absl::StartsWith(*path, absl::StrCat("/root/", entry.fingerprint, "/")) ||
      absl::StrContains(*path, "..") || !absl::EndsWith(*path, ".kv")) {
    __builtin_trap();
  }
  kvstrata::JournalEntry again;
  const std::string text = kvstrata::WriteJournal::FormatLine(entry);
  if (!kvstrata::WriteJournal::ParseLine(text, &again) || again.fingerprint != entry.fingerprint ||
      again.key != entry.key || again.file_bytes != entry.file_bytes ||
      again.removed != entry.removed) {
    __builtin_trap();
  }
  return 0;
}
