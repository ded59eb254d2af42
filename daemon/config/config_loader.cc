#include "daemon/config/config_loader.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include <toml++/toml.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/common/runtime_paths.h"
#include "daemon/config/config_extract.h"
#include "daemon/config/default_config_toml.h"

namespace kvstrata {
namespace {

using Sources = std::map<std::string, std::string>;

absl::StatusOr<toml::table> ParseToml(std::string_view text, std::string_view origin) {
  // toml++ reports syntax errors by exception; it never leaves this function.
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& error) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(origin), ":", error.source().begin.line, ":",
                     error.source().begin.column, ": ", std::string(error.description())));
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config file '", path, "' is a directory, not a TOML file"));
  }
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("config file '", path, "' cannot be read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string NodeText(const toml::node& node);

// What a value of `want`'s type is, in words, for key `dotted`.
std::string Expected(const std::string& dotted, const toml::node& want) {
  if (IsByteSizeKey(dotted)) return "a size such as \"4GiB\" or a number of bytes";
  if (want.is_boolean()) return "a boolean (true or false)";
  if (want.is_integer()) return "an integer";
  if (want.is_floating_point()) return "a number";
  return "a string (in quotes)";
}

// `got` in words: its type and, for a single value, the value.
std::string Described(const toml::node& got) {
  if (got.is_table()) return "a table";
  if (got.is_array()) return "an array";
  if (got.is_string()) return absl::StrCat("the string \"", NodeText(got), "\"");
  const char* kind = got.is_boolean()          ? "boolean"
                     : got.is_integer()        ? "integer"
                     : got.is_floating_point() ? "number"
                                               : "value";
  return absl::StrCat("the ", kind, " ", NodeText(got));
}

// `value` as the type of `want`, or nullopt when it is not one: a float key takes an
// integer, a byte-size key a bare integer (bytes).
bool Assign(const std::string& dotted, const toml::node& want, const toml::node& value,
            std::string_view key, toml::table& target) {
  if (want.type() == value.type()) {
    target.insert_or_assign(key, value);
  } else if (want.is_floating_point() && value.is_integer()) {
    target.insert_or_assign(key, static_cast<double>(*value.value<int64_t>()));
  } else if (want.is_string() && value.is_integer() && IsByteSizeKey(dotted)) {
    target.insert_or_assign(key, absl::StrCat(*value.value<int64_t>()));
  } else {
    return false;
  }
  return true;
}

// Keys renamed since they were first published: the old name is still read (with a
// warning), so an existing configuration keeps working. Section "tiers": every tier's.
struct RenamedKey {
  absl::string_view section, old_key, new_key;
};
constexpr RenamedKey kRenamedKeys[] = {
    {"l1", "admission_threshold", "admission_min_lookups"},
    {"tiers", "admission_threshold", "write_down_min_hits"},
};

// `key` of `section` under its current name; a renamed one adds a warning. `shown`: the
// section as the user named it (a tier's label for "tiers").
std::string CurrentKey(absl::string_view section, absl::string_view key,
                       std::vector<std::string>& warnings, absl::string_view shown = {}) {
  if (shown.empty()) shown = section;
  for (const RenamedKey& r : kRenamedKeys) {
    if (r.section == section && r.old_key == key) {
      warnings.push_back(absl::StrCat("config key '", shown, ".", key, "' is deprecated: use '",
                                      shown, ".", r.new_key, "' (same meaning)"));
      return std::string(r.new_key);
    }
  }
  return std::string(key);
}

// The tier entry labelled `label` in the [[tiers]] list of `merged`; nullptr when none.
toml::table* TierEntry(toml::table& merged, absl::string_view label) {
  toml::array* list = merged["tiers"].as_array();
  if (list == nullptr) return nullptr;
  for (toml::node& node : *list) {
    toml::table* entry = node.as_table();
    if (entry == nullptr) continue;
    const auto* name = entry->get_as<std::string>("label");
    if (name != nullptr && name->get() == label) return entry;
  }
  return nullptr;
}

// Copies the keys of `from` over the keys `to` has (`label`'s tier entry, or a section);
// each unknown key or mistyped value adds an error naming `shown`.key.
void MergeKeys(const toml::table& from, toml::table& to, absl::string_view renamed_section,
               absl::string_view shown, absl::string_view source, Sources& sources,
               std::vector<std::string>& errors, std::vector<std::string>& warnings) {
  for (auto&& [file_key, value] : from) {
    std::string key = CurrentKey(renamed_section, std::string(file_key.str()), warnings, shown);
    std::string dotted = absl::StrCat(shown, ".", key);
    toml::node* current = to.get(key);
    if (renamed_section == "tiers" && (key == "label" || key == "kind")) {
      errors.push_back(absl::StrCat("config key '", dotted, "': a tier's ", key,
                                    " is set in its [[tiers]] entry only"));
      continue;
    }
    if (current == nullptr) {
      errors.push_back(absl::StrCat("config: unknown key '", dotted,
                                    "' (kvstratad --print_default_config lists every key)"));
      continue;
    }
    if (!Assign(dotted, *current, value, key, to)) {
      errors.push_back(absl::StrCat("config key '", dotted, "': got ", Described(value),
                                    ": expected ", Expected(dotted, *current)));
      continue;
    }
    sources[dotted] = std::string(source);
  }
}

// A [[tiers]] list (the embedded default's, then a config file's, which replaces it): each
// entry starts from its kind's defaults (`kinds`: the embedded default's [tier_kinds]
// tables), enabled and with no path, and takes the keys it sets (`source`: "default" or
// "file").
void MergeTierList(const toml::node& node, const toml::table& kinds, absl::string_view source,
                   toml::table& merged, Sources& sources, std::vector<std::string>& errors,
                   std::vector<std::string>& warnings) {
  const toml::array* list = node.as_array();
  if (list == nullptr || (!list->empty() && !list->is_array_of_tables())) {
    errors.push_back(
        absl::StrCat("config key 'tiers': got ", Described(node), ": expected [[tiers]] tables"));
    return;
  }
  std::string kind_names;
  for (auto&& [name, table] : kinds) {
    absl::StrAppend(&kind_names, kind_names.empty() ? "" : ", ", "\"", std::string(name.str()),
                    "\"");
  }
  toml::array tiers;
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::table& given = *list->get(i)->as_table();
    const std::string at = absl::StrCat("tiers[", i, "]");
    std::optional<std::string> kind = given["kind"].value<std::string>();
    std::optional<std::string> label = given["label"].value<std::string>();
    if (!kind.has_value() || !given["kind"].is_string() || !kinds.contains(*kind) ||
        !kinds.get(*kind)->is_table()) {
      errors.push_back(absl::StrCat(
          "config key '", at, ".kind': ",
          given.contains("kind") ? absl::StrCat("got ", Described(*given.get("kind"))) : "missing",
          ": expected one of ", kind_names));
      continue;
    }
    if (!label.has_value() || !given["label"].is_string()) {
      errors.push_back(absl::StrCat("config key '", at, ".label': ",
                                    given.contains("label")
                                        ? absl::StrCat("got ", Described(*given.get("label")))
                                        : "missing",
                                    ": expected the tier's name, e.g. label = \"nvme\""));
      continue;
    }
    toml::table entry = *kinds.get_as<toml::table>(*kind);
    entry.insert_or_assign("kind", *kind);
    entry.insert_or_assign("label", *label);
    entry.insert_or_assign("enabled", true);
    entry.insert_or_assign("path", "");
    toml::table rest = given;
    rest.erase("label");
    rest.erase("kind");
    std::string shown = label->empty() ? at : *label;
    MergeKeys(rest, entry, "tiers", shown, source, sources, errors, warnings);
    if (source != "default") {
      for (const char* key : {"label", "kind", "enabled", "path"}) {
        sources[absl::StrCat(shown, ".", key)] = std::string(source);
      }
    }
    tiers.push_back(std::move(entry));
  }
  merged.insert_or_assign("tiers", std::move(tiers));
}

// Copies every key of `file` over `merged`; keys must exist in the default already (a
// tier's: in its kind's defaults). Each mistake adds a line to `errors`; the other keys
// are still merged. The file's [[tiers]] list first, then the sections: a section named
// after a tier's label sets that tier's keys ([l2], [l3]).
void MergeFile(const toml::table& file, const toml::table& kinds, toml::table& merged,
               Sources& sources, std::vector<std::string>& errors,
               std::vector<std::string>& warnings) {
  if (const toml::node* tiers = file.get("tiers"); tiers != nullptr) {
    MergeTierList(*tiers, kinds, "file", merged, sources, errors, warnings);
  }
  for (auto&& [section_key, section_node] : file) {
    std::string section(section_key.str());
    if (section == "tiers") continue;
    if (section == "tenants") {  // [[tenants]]: an array of tables, checked by ExtractConfig
      if (!section_node.is_array()) {
        errors.push_back(absl::StrCat("config key 'tenants': got ", Described(section_node),
                                      ": expected [[tenants]] tables"));
        continue;
      }
      merged.insert_or_assign("tenants", section_node);
      sources["tenants"] = "file";
      continue;
    }
    toml::table* target = merged[section].as_table();
    bool tier = false;
    if (target == nullptr) {
      target = TierEntry(merged, section);
      tier = target != nullptr;
    }
    if (target == nullptr || !section_node.is_table()) {
      std::string known;
      for (auto&& [name, node] : merged) {
        if (node.is_table())
          absl::StrAppend(&known, known.empty() ? "" : ", ", std::string(name.str()));
      }
      for (const toml::node& entry : *merged["tiers"].as_array()) {
        if (auto label = entry.as_table()->get_as<std::string>("label"); label != nullptr) {
          absl::StrAppend(&known, ", ", label->get());
        }
      }
      errors.push_back(absl::StrCat("config: unknown section '", section, "': expected one of ",
                                    known, " (a tier's label), [[tiers]] or [[tenants]]"));
      continue;
    }
    MergeKeys(*section_node.as_table(), *target, tier ? "tiers" : section, section, "file", sources,
              errors, warnings);
  }
}

absl::Status AssignTyped(toml::table& section, const std::string& key, const std::string& dotted,
                         absl::string_view text) {
  const toml::node& current = *section.get(key);
  bool ok = true;
  if (current.is_string()) {
    absl::string_view unquoted = text;
    if (unquoted.size() >= 2 && unquoted.front() == '"' && unquoted.back() == '"') {
      unquoted = unquoted.substr(1, unquoted.size() - 2);
    }
    section.insert_or_assign(key, std::string(unquoted));
  } else if (int64_t i = 0; current.is_integer() && (ok = absl::SimpleAtoi(text, &i))) {
    section.insert_or_assign(key, i);
  } else if (double d = 0; current.is_floating_point() && (ok = absl::SimpleAtod(text, &d))) {
    section.insert_or_assign(key, d);
  } else if (bool b = false; current.is_boolean() && (ok = absl::SimpleAtob(text, &b))) {
    section.insert_or_assign(key, b);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --set ", dotted, ": '", text, "' is not ", Expected(dotted, current)));
  }
  return absl::OkStatus();
}

absl::Status ApplyOverride(const std::string& assignment, toml::table& merged, Sources& sources,
                           std::vector<std::string>& warnings) {
  size_t eq = assignment.find('=');
  size_t dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --set '", assignment, "': expected section.key=value"));
  }
  std::string section = assignment.substr(0, dot);
  toml::table* target = merged[section].as_table();
  bool tier = false;
  if (target == nullptr) {  // a tier's label: --set=l2.capacity=64GiB
    target = TierEntry(merged, section);
    tier = target != nullptr;
  }
  std::string key = CurrentKey(tier ? "tiers" : section, assignment.substr(dot + 1, eq - dot - 1),
                               warnings, section);
  std::string dotted = absl::StrCat(section, ".", key);
  if (tier && (key == "label" || key == "kind")) {
    return absl::InvalidArgumentError(absl::StrCat("flag --set ", dotted, ": a tier's ", key,
                                                   " is set in its [[tiers]] entry only"));
  }
  if (target == nullptr || target->get(key) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --set: unknown key '", dotted,
                     "' (kvstratad --print_default_config lists every key)"));
  }
  absl::Status status = AssignTyped(*target, key, dotted, assignment.substr(eq + 1));
  if (status.ok()) sources[dotted] = "flag";
  return status;
}

// One error as it is; several as a count and one per line.
absl::Status Errors(const std::vector<std::string>& errors) {
  if (errors.size() == 1) return absl::InvalidArgumentError(errors[0]);
  std::string text = absl::StrCat(errors.size(), " configuration errors:");
  for (const std::string& e : errors) absl::StrAppend(&text, "\n  ", e);
  return absl::InvalidArgumentError(text);
}

std::string NodeText(const toml::node& node) {
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* d = node.as_floating_point()) return absl::StrCat(d->get());
  std::ostringstream out;
  node.visit([&out](const auto& value) { out << value; });
  return out.str();
}

void RecordEntries(const toml::table& merged, const Sources& sources, Config& config) {
  // A tier's keys as <label>.key (its label is the section's name).
  auto record = [&](const std::string& section, const toml::table& table, bool tier) {
    for (auto&& [key, value] : table) {
      if (tier && key.str() == "label") continue;
      std::string dotted = absl::StrCat(section, ".", std::string(key.str()));
      auto source = sources.find(dotted);
      config.entries.push_back(
          {dotted, NodeText(value), source == sources.end() ? "default" : source->second});
    }
  };
  for (auto&& [section, node] : merged) {
    if (const toml::table* table = node.as_table(); table != nullptr) {
      record(std::string(section.str()), *table, false);
    }
  }
  // The tiers by their labels, in their order ([[tenants]] are listed below).
  for (const toml::node& node : *merged["tiers"].as_array()) {
    const toml::table& entry = *node.as_table();
    record(*entry["label"].value<std::string>(), entry, true);
  }
  for (size_t i = 0; i < config.tenants.size(); ++i) {
    // Which identities exist is the admin's to see; token files are paths, not tokens.
    const TenantConfig& t = config.tenants[i];
    config.entries.push_back({absl::StrCat("tenants[", i, "].name"), t.name, "file"});
  }
  std::ostringstream out;
  out << merged;
  config.effective_toml = out.str();
}

}  // namespace

absl::string_view DefaultConfigToml() { return kDefaultConfigToml; }

absl::StatusOr<Config> LoadConfig(const std::string& path,
                                  const std::vector<std::string>& overrides) {
  absl::StatusOr<toml::table> merged = ParseToml(kDefaultConfigToml, "default_config.toml");
  if (!merged.ok()) return merged.status();
  Sources sources;
  std::vector<std::string> errors, warnings;
  // The kinds' defaults ([tier_kinds], not a section anyone sets), and the default
  // [[tiers]] list built from them as a file's is.
  const toml::table kinds = *(*merged)["tier_kinds"].as_table();
  merged->erase("tier_kinds");
  MergeTierList(*merged->get("tiers"), kinds, "default", *merged, sources, errors, warnings);
  if (!errors.empty()) return absl::InternalError(absl::StrCat("default_config.toml: ", errors[0]));
  if (!path.empty()) {
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) return text.status();
    absl::StatusOr<toml::table> file = ParseToml(*text, path);
    if (!file.ok()) return file.status();
    std::vector<std::string> file_errors;
    std::vector<std::string> file_warnings;
    MergeFile(*file, kinds, *merged, sources, file_errors, file_warnings);
    for (const std::string& e : file_errors) errors.push_back(absl::StrCat(path, ": ", e));
    for (const std::string& w : file_warnings) warnings.push_back(absl::StrCat(path, ": ", w));
  }
  for (const std::string& assignment : overrides) {
    if (absl::Status s = ApplyOverride(assignment, *merged, sources, warnings); !s.ok()) {
      errors.emplace_back(s.message());
    }
  }
  // Values that failed above keep their default, so every other mistake is found too.
  Config config = ExtractConfig(*merged, errors);
  if (!errors.empty()) return Errors(errors);
  config.config_path = path;
  config.warnings = std::move(warnings);
  // What an empty value stands for (the socket, the L2 directory, the pod id) is what is
  // shown: `kvstrata config` and --toml print the values in use.
  auto resolved = [&](const char* section, const char* key, const std::string& value) {
    toml::table* table = (*merged)[section].as_table();
    if (const auto* now = table->get_as<std::string>(key); now != nullptr && now->get().empty()) {
      table->insert_or_assign(key, value);
    }
  };
  resolved("server", "socket", config.server.socket);
  toml::array& tiers = *(*merged)["tiers"].as_array();
  for (size_t i = 0; i < tiers.size() && i < config.tiers.size(); ++i) {
    toml::table& entry = *tiers.get(i)->as_table();
    if (entry["path"].value<std::string>() == "") {
      entry.insert_or_assign("path", config.tiers[i].path);
    }
  }
  resolved("events", "pod_id", config.events.pod_id);
  resolved("events", "node_name", config.events.node_name);
  RecordEntries(*merged, sources, config);
  return config;
}

}  // namespace kvstrata
