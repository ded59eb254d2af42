// The "object" kind's maker: its [tier_kinds.object] keys (default_config.toml) into
// ObjectTierOptions, its credentials, and the tier opened.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/config/tier_kind_keys.h"
#include "daemon/tiers/object/object_tier.h"
#include "daemon/tiers/tier_factory.h"

namespace kvstrata {
namespace {

// Segments of [A-Za-z0-9._-] joined by single '/', no '.' or '..' segment.
bool GoodPrefix(absl::string_view prefix) {
  if (prefix.empty() || prefix.size() > 200) return false;
  for (absl::string_view part : absl::StrSplit(prefix, '/')) {
    if (part.empty() || part == "." || part == ".." ||
        !std::all_of(part.begin(), part.end(), [](char c) {
          return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
        })) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BlockTier>> MakeObjectTier(const LowerTierConfig& c,
                                                          const TierDescriptor& d,
                                                          const TierContext& context) {
  TierKindKeyReader r(c.kind_keys, c.name);
  ObjectTierOptions o;
  o.name = d.label;
  o.tier = d.id;
  o.capacity_bytes = c.capacity_bytes;
  o.high_watermark = c.high_watermark;
  o.low_watermark = c.low_watermark;
  o.s3.endpoint = r.String("endpoint");
  if (o.s3.endpoint.empty()) r.Fail("endpoint", "is empty: expected http(s)://host[:port]");
  o.s3.bucket = r.String("bucket");
  if (o.s3.bucket.empty()) r.Fail("bucket", "is empty: expected the bucket's name");
  o.s3.region = r.String("region");
  o.s3.path_style = r.OneOf("addressing", {"path", "virtual-host"}) == "path";
  o.s3.verify_tls = r.Bool("verify_tls");
  o.s3.ca_file = r.Path("ca_file");
  o.s3.max_in_flight = static_cast<size_t>(r.Int("max_in_flight", 1, 1024));
  o.s3.connect_timeout = absl::Milliseconds(r.Int("connect_timeout_ms", 1, 600'000));
  o.s3.request_timeout = absl::Milliseconds(r.Int("request_timeout_ms", 1, 3'600'000));
  o.prefix = r.String("prefix");
  if (!GoodPrefix(o.prefix)) {
    r.Fail("prefix", absl::StrCat("'", o.prefix,
                                  "' is not a prefix: expected segments of [A-Za-z0-9._-] "
                                  "joined by '/', e.g. \"kvstrata/prod\""));
  }
  const std::string credentials_file = r.Path("credentials_file");
  const std::string profile = r.String("profile");
  o.presence_ttl = absl::Milliseconds(r.Int("presence_ttl_ms", 0, 3'600'000));
  o.negative_cache_ttl = absl::Milliseconds(r.Int("negative_cache_ms", 0, 3'600'000));
  o.access_record_interval = absl::Milliseconds(r.Int("access_record_interval_ms", 0, 86'400'000));
  o.eviction_interval = absl::Milliseconds(r.Int("eviction_interval_ms", 100, 86'400'000));
  o.audit_interval = absl::Seconds(r.Int("audit_interval_s", 1, 31'536'000));
  o.follow_interval = absl::Milliseconds(r.Int("follow_interval_ms", 0, 3'600'000));
  const int64_t claim_expiry_ms = r.Int("claim_expiry_ms", 1000, 86'400'000);
  o.holder_expiry = absl::Milliseconds(claim_expiry_ms);
  // A live daemon refreshes its record every eviction interval (and a round may run late).
  if (r.status().ok() && o.holder_expiry < 2 * o.eviction_interval) {
    r.Fail("claim_expiry_ms",
           absl::StrCat(claim_expiry_ms, " is under twice eviction_interval_ms (",
                        absl::ToInt64Milliseconds(o.eviction_interval),
                        "), how often a live daemon refreshes its usage record: live daemons' "
                        "claims would expire"));
  }
  if (absl::Status s = r.status(); !s.ok()) return s;
  absl::StatusOr<S3Credentials> credentials = LoadCredentials(credentials_file, profile);
  if (!credentials.ok()) {
    return absl::Status(credentials.status().code(),
                        absl::StrCat("tier '", c.name, "': ", credentials.status().message()));
  }
  o.s3.credentials = *std::move(credentials);
  o.observer = context.observer;
  o.namespace_ids = context.namespace_ids;
  o.clock = context.clock;
  absl::StatusOr<std::unique_ptr<ObjectTier>> opened = ObjectTier::Open(std::move(o));
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("tier '", c.name, "': ", opened.status().message()));
  }
  return std::unique_ptr<BlockTier>(*std::move(opened));
}

}  // namespace kvstrata
