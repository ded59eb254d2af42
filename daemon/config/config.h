// The daemon's configuration: the embedded default (default_config.toml), overlaid by a
// config file, overlaid by --set overrides. Every value is validated when loaded; an
// unknown key or a bad value stops the daemon with a message naming the key.
#ifndef KVSTRATA_DAEMON_CONFIG_CONFIG_H_
#define KVSTRATA_DAEMON_CONFIG_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/tier_kind_keys.h"

namespace kvstrata {

struct ServerConfig {
  std::string socket;  // Resolved: never empty after loading.
  uint32_t socket_mode = 0660;
  std::string tcp_address;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string auth_token_file;
  std::string metrics_address;
  uint64_t max_message_bytes = 16 << 20;
  int64_t shutdown_timeout_seconds = 10;
};

struct LogConfig {
  std::string level = "info";
  std::string format = "text";
};

struct SessionsConfig {
  int64_t heartbeat_timeout_ms = 10000;
  int64_t max_heartbeat_timeout_ms = 300000;
  int64_t max_sessions = 1024;
  int64_t lease_ttl_ms = 5000;
  int64_t max_lease_ttl_ms = 60000;
};

struct TierConfig {
  std::string name;  // the tier's label: "l1", or a [[tiers]] entry's ("l2", "l3", "nvme").
  bool enabled = true;
  std::string path;  // a lower tier's directory (resolved for a local one).
  uint64_t capacity_bytes = 0;
  std::string eviction_policy = "lru";
};

struct L1Config : TierConfig {
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  int64_t admission_min_lookups = 0;  // lookups (misses) before a block is stored in L1
  std::string huge_pages = "auto";
  uint64_t slab_bytes = 64 << 20;
  int64_t promotion_wait_ms = 5000;
};

// One tier below L1: an entry of the [[tiers]] list, of any kind the tier factory knows
// (daemon/tiers/tier_factory.h: "local-file", the default "l2"; "shared-file", the default
// "l3"; "object"). A `[<label>]` section sets the keys of the entry with that label ([l2],
// [l3] as before). The fields are the keys the tier stack reads for every kind (and the
// file kinds' own); the keys only a kind reads are in `kind_keys`, read by the kind
// (tier_kind_keys.h). See docs/configuration.md.
struct LowerTierConfig : TierConfig {
  std::string kind;  // a kind of the tier factory: "local-file", "shared-file", "object"
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  bool write_back = false;          // write_policy = "write-back"; else write-through
  int64_t write_down_min_hits = 0;  // L1 hits before a block is written to this tier
  int64_t io_threads = 4;
  int64_t write_queue_blocks = 1024;
  std::string backlog_policy = "defer";  // "defer" or "drop"
  std::string fsync = "none";            // "none", "file", "file-and-dir"
  int64_t probe_timeout_ms = 5;
  int64_t negative_cache_ms = 2000;           // shared-file only
  int64_t access_record_interval_ms = 60000;  // shared-file only
  int64_t eviction_interval_ms = 10000;       // shared-file only
  int64_t audit_interval_s = 3600;            // shared-file only
  int64_t follow_interval_ms = 1000;          // shared-file only; 0 = do not follow
  std::string presence_check = "async";       // shared tiers; "async" or "sync"
  TierKindKeys kind_keys;                     // every other key of the entry (its kind's own)
};

// The GPU data path (daemon/transfer).
struct GpuConfig {
  int64_t copy_streams = 4;
  std::string copy_strategy = "auto";
  uint64_t staged_max_piece_bytes = 256 * 1024;
  bool calibrate = true;
};

// KV events for cache-aware routers (daemon/events). Off by default.
struct EventsConfig {
  bool enabled = false;
  std::string endpoint;          // ZMQ PUB; "" = no ZMQ (PollEvents only)
  std::string replay_endpoint;   // ZMQ ROUTER; "" = no replay
  std::string pod_id;            // the topic's <id>: this key, else "node:<node_name>", else host
  std::string node_name;         // this key, else $NODE_NAME when pod_id is ""; may stay ""
  std::string encoding = "map";  // "map" (vLLM 0.26+) or "array"
  int64_t data_parallel_rank = 0;
  int64_t buffer_batches = 10000;
  int64_t max_queue_events = 100000;
  int64_t send_hwm = 100000;
  int64_t flush_interval_ms = 10;
};

// One tenant ([[tenants]] in a config file; none by default = single-tenant). See
// docs/security.md.
struct TenantConfig {
  std::string name;            // [a-z0-9_-], 1..63 bytes, unique, not "default"
  std::vector<uint32_t> uids;  // Unix-socket peers with one of these uids ...
  std::vector<uint32_t> gids;  // ... or else one of these primary gids
  std::string token_file;      // TCP callers presenting this bearer token
  bool admin = false;          // may run admin operations, sees every tenant
  bool shared_memory = false;  // may map L1 partition 0 (host mode): trusted with its bytes
  uint64_t l1_capacity = 0;  // an L1 partition of its own (quota; host mode maps only it); 0 = none
};

// Where an effective value came from, for `kvstrata config`.
struct ConfigEntry {
  std::string key;  // "section.key"
  std::string value;
  std::string source;  // "default", "file" or "flag".
};

struct Config {
  ServerConfig server;
  LogConfig log;
  SessionsConfig sessions;
  L1Config l1;
  std::vector<LowerTierConfig> tiers;  // below L1, fastest first (ids 1, 2, ...)
  GpuConfig gpu;
  EventsConfig events;
  std::vector<TenantConfig> tenants;
  std::string config_path;            // Empty when only the embedded default is used.
  std::vector<ConfigEntry> entries;   // Every key, in file order.
  std::vector<std::string> warnings;  // Renamed keys that were used by their old name.
  std::string effective_toml;         // The merged document.
};

// The [[tiers]] entry labelled `label`; nullptr when there is none.
inline const LowerTierConfig* FindTier(const Config& config, std::string_view label) {
  for (const LowerTierConfig& t : config.tiers) {
    if (t.name == label) return &t;
  }
  return nullptr;
}

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_CONFIG_CONFIG_H_
