// Where a job's completion goes when its submitter asked for it on its own connection (a
// fast-path job frame of version 2, daemon/rpc/fast_path/job_wire.h). The JobManager offers the
// completion to the job's sink first; when Deliver answers false (the connection is gone,
// or has no room now) it queues the completion for the session instead (PollCompletions /
// WatchCompletions), so a completion is never lost and goes one way only.
// Implementations are thread-safe; Deliver runs on whichever thread finished the job (a
// transfer lane, the deferred-load thread, a submitting thread) and must not wait on a
// slow reader.
#ifndef KVSTRATA_DAEMON_JOBS_COMPLETION_SINK_H_
#define KVSTRATA_DAEMON_JOBS_COMPLETION_SINK_H_

#include "daemon/common/ids.h"
#include "daemon/jobs/completion_queue.h"

namespace kvstrata {

class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  // True when the completion was handed over whole.
  virtual bool Deliver(SessionId session, const JobCompletion& completion) = 0;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_JOBS_COMPLETION_SINK_H_
