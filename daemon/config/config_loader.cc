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
// warning), so an existing configuration keeps working.
struct RenamedKey {
  absl::string_view section, old_key, new_key;
};
constexpr RenamedKey kRenamedKeys[] = {
    {"l1", "admission_threshold", "admission_min_lookups"},
    {"l2", "admission_threshold", "write_down_min_hits"},
    {"l3", "admission_threshold", "write_down_min_hits"},
};

// `key` of `section` under its current name; a renamed one adds a warning.
std::string CurrentKey(absl::string_view section, absl::string_view key,
                       std::vector<std::string>& warnings) {
  for (const RenamedKey& r : kRenamedKeys) {
    if (r.section == section && r.old_key == key) {
      warnings.push_back(absl::StrCat("config key '", section, ".", key, "' is deprecated: use '",
                                      section, ".", r.new_key, "' (same meaning)"));
      return std::string(r.new_key);
    }
  }
  return std::string(key);
}

// Copies every key of `file` over `merged`; keys must exist in the default already. Each
// mistake adds a line to `errors`; the other keys are still merged.
void MergeFile(const toml::table& file, toml::table& merged, Sources& sources,
               std::vector<std::string>& errors, std::vector<std::string>& warnings) {
  for (auto&& [section_key, section_node] : file) {
    std::string section(section_key.str());
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
    if (target == nullptr || !section_node.is_table()) {
      std::string known;
      for (auto&& [name, node] : merged) {
        if (node.is_table())
          absl::StrAppend(&known, known.empty() ? "" : ", ", std::string(name.str()));
      }
      errors.push_back(absl::StrCat("config: unknown section '", section, "': expected one of ",
                                    known, ", or [[tenants]]"));
      continue;
    }
    for (auto&& [file_key, value] : *section_node.as_table()) {
      std::string key = CurrentKey(section, std::string(file_key.str()), warnings);
      std::string dotted = absl::StrCat(section, ".", key);
      toml::node* current = target->get(key);
      if (current == nullptr) {
        errors.push_back(absl::StrCat("config: unknown key '", dotted,
                                      "' (kvstratad --print_default_config lists every key)"));
        continue;
      }
      if (!Assign(dotted, *current, value, key, *target)) {
        errors.push_back(absl::StrCat("config key '", dotted, "': got ", Described(value),
                                      ": expected ", Expected(dotted, *current)));
        continue;
      }
      sources[dotted] = "file";
    }
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
  std::string key = CurrentKey(section, assignment.substr(dot + 1, eq - dot - 1), warnings);
  std::string dotted = absl::StrCat(section, ".", key);
  toml::table* target = merged[section].as_table();
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
  for (auto&& [section, node] : merged) {
    const toml::table* table = node.as_table();
    if (table == nullptr) continue;  // [[tenants]], listed below
    for (auto&& [key, value] : *table) {
      std::string dotted = absl::StrCat(std::string(section.str()), ".", std::string(key.str()));
      auto source = sources.find(dotted);
      config.entries.push_back(
          {dotted, NodeText(value), source == sources.end() ? "default" : source->second});
    }
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
  if (!path.empty()) {
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) return text.status();
    absl::StatusOr<toml::table> file = ParseToml(*text, path);
    if (!file.ok()) return file.status();
    std::vector<std::string> file_errors;
    std::vector<std::string> file_warnings;
    MergeFile(*file, *merged, sources, file_errors, file_warnings);
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
  resolved("l2", "path", config.l2.path);
  resolved("events", "pod_id", config.events.pod_id);
  resolved("events", "node_name", config.events.node_name);
  RecordEntries(*merged, sources, config);
  return config;
}

}  // namespace kvstrata
