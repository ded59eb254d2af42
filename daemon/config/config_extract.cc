#include "daemon/config/config_extract.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/byte_size.h"
#include "daemon/common/runtime_paths.h"
#include "daemon/common/tier.h"
#include "daemon/config/config_address.h"

namespace kvstrata {
namespace {

// Reads typed values out of one section; every failure is added to `errors`, naming the
// key, the value and what is expected.
class SectionReader {
 public:
  SectionReader(const toml::table& merged, std::string section, std::vector<std::string>& errors)
      : SectionReader(*merged.get_as<toml::table>(section), section, errors, 0) {}
  // A table of its own (a [[tiers]] entry), its keys named `shown`.key.
  SectionReader(const toml::table& table, std::string shown, std::vector<std::string>& errors,
                int /*own_table*/)
      : table_(table), section_(std::move(shown)), errors_(errors) {}

  std::string String(const char* key) { return *table_[key].value<std::string>(); }
  bool Bool(const char* key) { return *table_[key].value<bool>(); }
  double Double(const char* key) { return *table_[key].value<double>(); }

  int64_t Int(const char* key, int64_t min, int64_t max) {
    int64_t value = *table_[key].value<int64_t>();
    if (value < min || value > max) {
      Fail(key,
           absl::StrCat(value, " is out of range: expected an integer from ", min, " to ", max));
    }
    return value;
  }

  uint64_t Bytes(const char* key, uint64_t min) {
    std::string text = String(key);
    absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
    if (!bytes.ok()) return Fail(key, bytes.status().message()), 0;
    if (*bytes < min) {
      Fail(key, absl::StrCat("'", text, "' is too small: expected at least ", FormatByteSize(min)));
    }
    return *bytes;
  }

  std::string OneOf(const char* key, const std::set<std::string>& allowed) {
    std::string value = String(key);
    if (!allowed.contains(value)) {
      std::string list;
      for (const auto& a : allowed) absl::StrAppend(&list, list.empty() ? "" : ", ", a);
      Fail(key, absl::StrCat("'", value, "' is not one of: ", list));
    }
    return value;
  }

  // `text` checked by `check` (nullopt = fine) unless empty.
  std::string Address(const char* key,
                      const std::function<std::optional<std::string>(absl::string_view)>& check) {
    std::string text = String(key);
    if (!text.empty()) {
      if (std::optional<std::string> why = check(text); why.has_value()) Fail(key, *why);
    }
    return text;
  }

  void Fail(const char* key, absl::string_view why) {
    failed_.insert(key);
    errors_.push_back(absl::StrCat("config key '", section_, ".", key, "': ", why));
  }
  // Whether every one of `keys` was read without a failure (checks between keys skip
  // values already reported).
  bool Ok(std::initializer_list<const char*> keys) const {
    for (const char* key : keys) {
      if (failed_.contains(key)) return false;
    }
    return true;
  }

 private:
  const toml::table& table_;
  std::string section_;
  std::vector<std::string>& errors_;
  std::set<std::string> failed_;
};

const std::set<std::string> kPolicies = {"lru", "arc", "s3fifo"};

void ReadServer(SectionReader& r, ServerConfig& s) {
  s.socket = r.String("socket");
  if (s.socket.empty()) s.socket = DefaultSocketPath();
  if (s.socket.front() != '/') {
    r.Fail("socket", absl::StrCat("'", s.socket, "' is relative: expected an absolute path"));
  }
  if (s.socket.size() > 100) {
    r.Fail("socket", absl::StrCat("'", s.socket, "' is ", s.socket.size(),
                                  " bytes long: expected a path of at most 100 bytes"));
  }
  char* end = nullptr;
  std::string mode = r.String("socket_mode");
  s.socket_mode = static_cast<uint32_t>(std::strtoul(mode.c_str(), &end, 8));
  if (mode.empty() || *end != '\0' || s.socket_mode > 0777) {
    r.Fail("socket_mode",
           absl::StrCat("'", mode, "' is not an octal file mode: expected e.g. \"0660\""));
  }
  s.tcp_address = r.Address("tcp_address",
                            [](absl::string_view a) { return CheckHostPort(a, PortRule::kFixed); });
  s.tls_cert_file = r.String("tls_cert_file");
  s.tls_key_file = r.String("tls_key_file");
  s.auth_token_file = r.String("auth_token_file");
  if (s.tls_cert_file.empty() != s.tls_key_file.empty()) {
    // Named: the one missing.
    r.Fail(s.tls_key_file.empty() ? "tls_key_file" : "tls_cert_file",
           "tls_cert_file and tls_key_file go together: expected both set, or neither");
  }
  s.metrics_address = r.Address("metrics_address", [](absl::string_view a) {
    return CheckHostPort(a, PortRule::kZeroIsAny);
  });
  s.max_message_bytes = r.Bytes("max_message_bytes", 64 << 10);
  if (s.max_message_bytes > (1ULL << 30)) {
    r.Fail("max_message_bytes", absl::StrCat("'", r.String("max_message_bytes"),
                                             "' is too large: expected at most 1GiB"));
  }
  s.shutdown_timeout_seconds = r.Int("shutdown_timeout_seconds", 0, 3600);
}

void ReadSessions(SectionReader& r, SessionsConfig& s) {
  s.max_heartbeat_timeout_ms = r.Int("max_heartbeat_timeout_ms", 100, 86'400'000);
  if (!r.Ok({"max_heartbeat_timeout_ms"})) s.max_heartbeat_timeout_ms = 86'400'000;
  s.heartbeat_timeout_ms = r.Int("heartbeat_timeout_ms", 100, s.max_heartbeat_timeout_ms);
  s.max_sessions = r.Int("max_sessions", 1, 1'000'000);
  s.max_lease_ttl_ms = r.Int("max_lease_ttl_ms", 1, 3'600'000);
  if (!r.Ok({"max_lease_ttl_ms"})) s.max_lease_ttl_ms = 3'600'000;
  s.lease_ttl_ms = r.Int("lease_ttl_ms", 1, s.max_lease_ttl_ms);
}

void ReadWatermarks(SectionReader& r, double& high, double& low) {
  high = r.Double("high_watermark");
  low = r.Double("low_watermark");
  if (!(high > 0 && high <= 1)) {
    r.Fail("high_watermark", absl::StrCat(high,
                                          " is out of range: expected a number above 0 and "
                                          "at most 1"));
  }
  if (!(low > 0 && low < high)) {
    r.Fail("low_watermark", absl::StrCat(low,
                                         " is out of range: expected a number above 0 and "
                                         "below high_watermark (",
                                         high, ")"));
  }
}

// Copies the value of `key` (a string, integer, float or boolean: the loader checked its
// type against the kind's default) into `keys`.
void KeepKindKey(const std::string& key, const toml::node& value, TierKindKeys& keys) {
  if (auto s = value.value<std::string>(); value.is_string() && s) {
    keys.Set(key, *s);
  } else if (auto i = value.value<int64_t>(); value.is_integer() && i) {
    keys.Set(key, *i);
  } else if (auto d = value.value<double>(); value.is_floating_point() && d) {
    keys.Set(key, *d);
  } else if (auto b = value.value<bool>(); value.is_boolean() && b) {
    keys.Set(key, *b);
  }
}

// One [[tiers]] entry: the keys every kind has (what the tier stack reads), the file kinds'
// own, and every other key of the kind's table into kind_keys (the kind reads them).
void ReadTier(const toml::table& entry, SectionReader& r, LowerTierConfig& t) {
  t.name = r.String("label");
  t.kind = r.String("kind");
  const bool shared = t.kind == "shared-file";
  std::set<std::string> read = {"label",
                                "kind",
                                "enabled",
                                "path",
                                "capacity",
                                "high_watermark",
                                "low_watermark",
                                "write_policy",
                                "write_down_min_hits",
                                "io_threads",
                                "write_queue_blocks",
                                "backlog_policy",
                                "probe_timeout_ms"};
  t.enabled = r.Bool("enabled");
  t.path = r.String("path");
  // A relative path would follow the daemon's working directory (/ under systemd).
  if (!t.path.empty() && t.path.front() != '/') {
    r.Fail("path", absl::StrCat("'", t.path, "' is relative: expected an absolute path"));
  }
  if (t.path.empty() && t.kind == "local-file") t.path = DefaultTierPath(t.name);
  if (t.path.empty() && t.enabled && shared) {
    r.Fail("path", absl::StrCat("is empty: expected the shared directory (an absolute path) when ",
                                t.name, " is enabled"));
  }
  t.capacity_bytes = r.Bytes("capacity", 1 << 20);
  ReadWatermarks(r, t.high_watermark, t.low_watermark);
  t.write_back = r.OneOf("write_policy", {"write-through", "write-back"}) == "write-back";
  t.write_down_min_hits = r.Int("write_down_min_hits", 0, 1'000'000);
  t.io_threads = r.Int("io_threads", 1, 64);
  t.write_queue_blocks = r.Int("write_queue_blocks", 1, 1 << 24);
  t.backlog_policy = r.OneOf("backlog_policy", {"defer", "drop"});
  t.probe_timeout_ms = r.Int("probe_timeout_ms", 0, 60'000);
  // Keys of some kinds, read where the kind has them.
  if (entry.contains("eviction_policy")) {
    read.insert("eviction_policy");
    // The shared tier orders by the access times every daemon records: oldest first.
    t.eviction_policy =
        r.OneOf("eviction_policy", shared ? std::set<std::string>{"lru"} : kPolicies);
  }
  if (entry.contains("fsync")) {
    read.insert("fsync");
    t.fsync = r.OneOf("fsync", {"none", "file", "file-and-dir"});
  }
  if (entry.contains("presence_check")) {
    read.insert("presence_check");
    t.presence_check = r.OneOf("presence_check", {"async", "sync"});
  }
  if (shared) {
    read.insert({"negative_cache_ms", "access_record_interval_ms", "eviction_interval_ms",
                 "audit_interval_s", "follow_interval_ms"});
    t.negative_cache_ms = r.Int("negative_cache_ms", 0, 3'600'000);
    t.access_record_interval_ms = r.Int("access_record_interval_ms", 0, 86'400'000);
    t.eviction_interval_ms = r.Int("eviction_interval_ms", 100, 86'400'000);
    t.audit_interval_s = r.Int("audit_interval_s", 60, 31'536'000);
    t.follow_interval_ms = r.Int("follow_interval_ms", 0, 60'000);
    if (r.Ok({"follow_interval_ms"}) && t.follow_interval_ms > 0 && t.follow_interval_ms < 100) {
      r.Fail("follow_interval_ms", "must be 0 (off) or 100 .. 60000");
    }
  }
  for (auto&& [key, value] : entry) {
    std::string name(key.str());
    if (!read.contains(name)) KeepKindKey(name, value, t.kind_keys);
  }
}

// Whether `a` is `b` or a directory inside it (lexically).
bool SameOrInside(const std::string& a, const std::string& b) {
  std::string x = std::filesystem::path(a).lexically_normal().string();
  std::string y = std::filesystem::path(b).lexically_normal().string();
  while (x.size() > 1 && x.back() == '/') x.pop_back();
  while (y.size() > 1 && y.back() == '/') y.pop_back();
  return x == y || (x.size() > y.size() && x.compare(0, y.size(), y) == 0 &&
                    (y == "/" || x[y.size()] == '/'));
}

// The [[tiers]] list: each entry's keys, then what the list must hold as a whole (labels
// that name one tier each and no section, at most kMaxTiers - 1 tiers, no two enabled
// tiers in one directory).
std::vector<LowerTierConfig> ReadTiers(const toml::table& merged,
                                       const std::set<std::string>& sections,
                                       std::vector<std::string>& errors) {
  std::vector<LowerTierConfig> tiers;
  const toml::array& list = *merged.get_as<toml::array>("tiers");
  if (list.size() > kMaxTiers - 1) {
    errors.push_back(absl::StrCat("config key 'tiers': ", list.size(), " tiers: expected at most ",
                                  kMaxTiers - 1, " below L1"));
    return tiers;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const toml::table& entry = *list.get(i)->as_table();
    const std::string label = *entry["label"].value<std::string>();
    const std::string at = absl::StrCat("tiers[", i, "].label");
    if (label.empty() || label.size() > 32 ||
        label.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos ||
        label.front() == '-' || label.front() == '_') {
      errors.push_back(absl::StrCat("config key '", at, "': '", label,
                                    "' is not a tier label: expected 1 to 32 characters of "
                                    "[a-z0-9_-], starting with a letter or digit"));
      continue;
    }
    if (sections.contains(label)) {
      errors.push_back(absl::StrCat("config key '", at, "': '", label,
                                    "' is the name of a section: expected another label"));
      continue;
    }
    bool twice = false;
    for (const LowerTierConfig& other : tiers) twice = twice || other.name == label;
    if (twice) {
      errors.push_back(absl::StrCat("config key '", at, "': '", label,
                                    "' is used by another tier: expected one label per tier"));
      continue;
    }
    SectionReader reader(entry, label, errors, 0);
    LowerTierConfig tier;
    ReadTier(entry, reader, tier);
    for (const LowerTierConfig& other : tiers) {
      // A path already reported (empty, relative) is not compared.
      if (tier.enabled && other.enabled && reader.Ok({"path"}) && !tier.path.empty() &&
          !other.path.empty() &&
          (SameOrInside(tier.path, other.path) || SameOrInside(other.path, tier.path))) {
        reader.Fail("path", absl::StrCat("'", tier.path, "' overlaps ", other.name, ".path ('",
                                         other.path, "'): expected a directory of its own"));
      }
    }
    tiers.push_back(std::move(tier));
  }
  return tiers;
}

void ReadL1(SectionReader& r, L1Config& l1) {
  l1.name = "l1";
  l1.capacity_bytes = r.Bytes("capacity", 1 << 20);
  l1.eviction_policy = r.OneOf("eviction_policy", kPolicies);
  ReadWatermarks(r, l1.high_watermark, l1.low_watermark);
  l1.admission_min_lookups = r.Int("admission_min_lookups", 0, 1'000'000);
  l1.huge_pages = r.OneOf("huge_pages", {"auto", "on", "off"});
  l1.slab_bytes = r.Bytes("slab_size", 1 << 20);
  if (r.Ok({"slab_size"}) && l1.slab_bytes % (1 << 20) != 0) {
    r.Fail("slab_size", absl::StrCat("'", r.String("slab_size"),
                                     "' is not whole MiB: expected a multiple of 1MiB"));
  }
  if (r.Ok({"slab_size", "capacity"}) && l1.slab_bytes > l1.capacity_bytes) {
    r.Fail("slab_size", absl::StrCat("'", r.String("slab_size"), "' is more than l1.capacity ('",
                                     r.String("capacity"), "'): expected at most l1.capacity"));
  }
  l1.promotion_wait_ms = r.Int("promotion_wait_ms", 0, 600'000);
}

void ReadGpu(SectionReader& r, GpuConfig& g) {
  g.copy_streams = r.Int("copy_streams", 1, 8);
  g.copy_strategy = r.OneOf("copy_strategy", {"auto", "batch", "kernel", "staged", "loop"});
  g.staged_max_piece_bytes = r.Bytes("staged_max_piece_bytes", 0);
  g.calibrate = r.Bool("calibrate");
}

void ReadEvents(SectionReader& r, EventsConfig& e) {
  e.enabled = r.Bool("enabled");
  e.endpoint = r.Address("endpoint", CheckZmqEndpoint);
  e.replay_endpoint = r.Address("replay_endpoint", CheckZmqEndpoint);
  e.pod_id = r.String("pod_id");
  e.node_name = r.String("node_name");
  if (!e.node_name.empty() && !e.pod_id.empty()) {
    r.Fail("node_name", "node_name and pod_id both name the topic: expected one of them set");
  }
  const char* env_node = std::getenv("NODE_NAME");  // Kubernetes: the downward API's nodeName
  bool from_env = e.node_name.empty() && e.pod_id.empty() && env_node != nullptr;
  if (from_env) e.node_name = env_node;
  if (e.node_name.find('@') != std::string::npos) {
    r.Fail("node_name", absl::StrCat("'", e.node_name, "'", from_env ? " (from $NODE_NAME)" : "",
                                     " contains '@': expected a node name without '@'"));
  }
  if (!e.node_name.empty() && e.pod_id.empty()) e.pod_id = absl::StrCat("node:", e.node_name);
  if (e.pod_id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    e.pod_id = host[0] != '\0' ? host : "kvstrata";
  }
  if (e.pod_id.find('@') != std::string::npos) {
    r.Fail("pod_id", absl::StrCat("'", e.pod_id, "' contains '@': expected a name without '@'"));
  }
  e.encoding = r.OneOf("encoding", {"array", "map"});
  e.data_parallel_rank = r.Int("data_parallel_rank", 0, 1 << 20);
  e.buffer_batches = r.Int("buffer_batches", 1, 10'000'000);
  e.max_queue_events = r.Int("max_queue_events", 1, 100'000'000);
  e.send_hwm = r.Int("send_hwm", 0, 100'000'000);
  e.flush_interval_ms = r.Int("flush_interval_ms", 1, 10'000);
}

absl::Status TenantError(size_t index, absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("config key 'tenants[", index, "]", key.empty() ? "" : ".", key, "': ", why));
}

absl::StatusOr<std::vector<uint32_t>> ReadIds(const toml::table& t, size_t index, const char* key) {
  std::vector<uint32_t> ids;
  const toml::node* node = t.get(key);
  if (node == nullptr) return ids;
  const toml::array* list = node->as_array();
  if (list == nullptr) return TenantError(index, key, "expected an array of integers, e.g. [1000]");
  for (const toml::node& item : *list) {
    std::optional<int64_t> id = item.value<int64_t>();
    if (!item.is_integer() || !id.has_value() || *id < 0 || *id > 0xFFFFFFFE) {
      return TenantError(
          index, key,
          absl::StrCat("holds ", item.is_integer() ? absl::StrCat(*id) : "a non-integer",
                       ": expected integers from 0 to 4294967294"));
    }
    ids.push_back(static_cast<uint32_t>(*id));
  }
  return ids;
}

absl::StatusOr<TenantConfig> ReadTenant(const toml::node& node, size_t index) {
  const toml::table* t = node.as_table();
  if (t == nullptr) return TenantError(index, "", "expected a [[tenants]] table");
  const std::set<std::string> known = {"name",  "uids",          "gids",       "token_file",
                                       "admin", "shared_memory", "l1_capacity"};
  for (auto&& [key, value] : *t) {
    if (!known.contains(std::string(key.str()))) {
      return TenantError(index, std::string(key.str()),
                         "unknown key: expected name, uids, gids, token_file, admin, "
                         "shared_memory or l1_capacity");
    }
  }
  TenantConfig tenant;
  auto text = [&](const char* key, std::string& out) -> absl::Status {
    const toml::node* n = t->get(key);
    if (n == nullptr) return absl::OkStatus();
    if (!n->is_string()) return TenantError(index, key, "expected a string (in quotes)");
    out = *n->value<std::string>();
    return absl::OkStatus();
  };
  auto flag = [&](const char* key, bool& out) -> absl::Status {
    const toml::node* n = t->get(key);
    if (n == nullptr) return absl::OkStatus();
    if (!n->is_boolean()) return TenantError(index, key, "expected a boolean (true or false)");
    out = *n->value<bool>();
    return absl::OkStatus();
  };
  std::string l1_capacity;
  if (const toml::node* n = t->get("l1_capacity"); n != nullptr && n->is_integer()) {
    l1_capacity = absl::StrCat(*n->value<int64_t>());  // a bare number is bytes
  }
  for (absl::Status s :
       {text("name", tenant.name), text("token_file", tenant.token_file),
        flag("admin", tenant.admin), flag("shared_memory", tenant.shared_memory),
        l1_capacity.empty() ? text("l1_capacity", l1_capacity) : absl::OkStatus()}) {
    if (!s.ok()) return s;
  }
  if (!l1_capacity.empty()) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(l1_capacity);
    if (!bytes.ok()) return TenantError(index, "l1_capacity", bytes.status().message());
    if (*bytes < (1 << 20)) {
      return TenantError(index, "l1_capacity",
                         absl::StrCat("'", l1_capacity, "' is too small: expected at least 1MiB"));
    }
    tenant.l1_capacity = *bytes;
  }
  if (tenant.name.empty() || tenant.name.size() > 63 || tenant.name == "default" ||
      tenant.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") !=
          std::string::npos) {
    return TenantError(index, "name",
                       absl::StrCat("'", tenant.name,
                                    "' is not a tenant name: expected 1 to 63 characters of "
                                    "[a-z0-9_-], and not \"default\""));
  }
  absl::StatusOr<std::vector<uint32_t>> uids = ReadIds(*t, index, "uids");
  if (!uids.ok()) return uids.status();
  absl::StatusOr<std::vector<uint32_t>> gids = ReadIds(*t, index, "gids");
  if (!gids.ok()) return gids.status();
  tenant.uids = std::move(*uids);
  tenant.gids = std::move(*gids);
  if (!tenant.token_file.empty() && tenant.token_file.front() != '/') {
    return TenantError(
        index, "token_file",
        absl::StrCat("'", tenant.token_file, "' is relative: expected an absolute path"));
  }
  if (tenant.uids.empty() && tenant.gids.empty() && tenant.token_file.empty()) {
    return TenantError(index, "", "names no identity: give uids, gids and/or token_file");
  }
  return tenant;
}

std::vector<TenantConfig> ReadTenants(const toml::table& merged, std::vector<std::string>& errors) {
  std::vector<TenantConfig> tenants;
  const toml::array* list = merged.get_as<toml::array>("tenants");
  if (list == nullptr) return tenants;
  for (size_t i = 0; i < list->size(); ++i) {
    absl::StatusOr<TenantConfig> tenant = ReadTenant(*list->get(i), i);
    if (!tenant.ok()) {
      errors.emplace_back(tenant.status().message());
      continue;
    }
    bool twice = false;
    for (const TenantConfig& other : tenants) twice = twice || other.name == tenant->name;
    if (twice) {
      errors.emplace_back(
          TenantError(i, "name", absl::StrCat("'", tenant->name, "' is used twice")).message());
      continue;
    }
    tenants.push_back(std::move(*tenant));
  }
  return tenants;
}

const std::set<std::string, std::less<>> kByteSizeKeys = {
    "server.max_message_bytes", "l1.capacity", "l1.slab_size", "gpu.staged_max_piece_bytes"};

}  // namespace

// A tier's capacity is <label>.capacity.
bool IsByteSizeKey(std::string_view dotted) {
  return kByteSizeKeys.contains(dotted) || dotted.ends_with(".capacity");
}

Config ExtractConfig(const toml::table& merged, std::vector<std::string>& errors) {
  Config config;
  auto reader = [&](const char* section) { return SectionReader(merged, section, errors); };
  SectionReader server = reader("server"), log = reader("log"), sessions = reader("sessions"),
                l1 = reader("l1"), gpu = reader("gpu"), events = reader("events");
  ReadServer(server, config.server);
  config.log.level = log.OneOf("level", {"trace", "debug", "info", "warn", "error"});
  config.log.format = log.OneOf("format", {"text", "json"});
  ReadSessions(sessions, config.sessions);
  ReadL1(l1, config.l1);
  std::set<std::string> sections = {"tiers", "tenants", "tier_kinds"};
  for (auto&& [name, node] : merged) sections.insert(std::string(name.str()));
  config.tiers = ReadTiers(merged, sections, errors);
  ReadGpu(gpu, config.gpu);
  ReadEvents(events, config.events);
  config.tenants = ReadTenants(merged, errors);
  const ServerConfig& s = config.server;
  bool any_token = !s.auth_token_file.empty() ||
                   std::any_of(config.tenants.begin(), config.tenants.end(),
                               [](const TenantConfig& t) { return !t.token_file.empty(); });
  if (!s.tcp_address.empty() && s.tls_cert_file.empty() && !any_token) {
    errors.push_back(absl::StrCat("config key 'server.tcp_address': '", s.tcp_address,
                                  "' needs TLS (tls_cert_file, tls_key_file) and/or a token "
                                  "(server.auth_token_file, tenants[].token_file)"));
  }
  return config;
}

}  // namespace kvstrata
