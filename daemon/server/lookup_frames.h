// The frames of the lookup socket (LookupServer): lookups (daemon/common/lookup_wire.h,
// magic "KVSL") and job submissions (daemon/common/job_wire.h, magic "KVSJ"). Tells how
// long the frame at the front of a connection's bytes is, and answers a whole frame: the
// checks and calls of Control.Lookup / Control.SubmitStore / SubmitLoad (RunLookup,
// RunSubmitJob), each recorded as an RPC in the metrics. A header that cannot be trusted
// (magic, version, flags, kind, key count, key size) is answered with INVALID_ARGUMENT and
// the connection must close; errors of the call leave it open.
// Thread-safe (const); a Scratch is one connection's.
#ifndef KVSTRATA_DAEMON_SERVER_LOOKUP_FRAMES_H_
#define KVSTRATA_DAEMON_SERVER_LOOKUP_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "daemon/common/ids.h"
#include "daemon/metrics/metrics_sink.h"
#include "daemon/rpc/service_context.h"

namespace kvstrata {

class LookupFrames {
 public:
  // Buffers one connection reuses from frame to frame.
  struct Scratch {
    std::vector<std::string_view> views;
    std::vector<uint32_t> block_ids;
  };

  // `context` and `metrics` outlive this.
  LookupFrames(const ServiceContext& context, MetricsSink* metrics)
      : context_(context), metrics_(metrics) {}

  // The bytes of the frame at the front of `in`, or 0 when `in` is too short to tell. For a
  // header that cannot be trusted, its header's bytes (Answer then refuses it).
  size_t FrameBytes(std::string_view in) const;
  // Answers the whole frame `frame` (FrameBytes of it) of a connection of `tenant`,
  // appending the response to `out`. False when the connection must close after it.
  bool Answer(TenantId tenant, std::string_view frame, Scratch& scratch, std::string* out) const;
  // A response frame carrying only `status` (a refused connection).
  static std::string ErrorFrame(const absl::Status& status);

 private:
  bool AnswerLookup(TenantId tenant, std::string_view frame, Scratch& scratch,
                    std::string* out) const;
  bool AnswerJob(TenantId tenant, std::string_view frame, Scratch& scratch, std::string* out) const;

  const ServiceContext& context_;
  MetricsSink* const metrics_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_SERVER_LOOKUP_FRAMES_H_
