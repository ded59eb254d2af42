"""Job ids of submits that return before the daemon answered (job frames, kvstrata.job_socket).

A job sent as a job frame gets its id from the client at once: CLIENT_JOB_BIT, a counter of
the session and the session generation's tag (job_tag). The daemon's own id
for it comes later, in its answer to the frame. The daemon reports completions under its
ids, so the CompletionTracker asks a JobIdMap which client id a completion belongs to. A
completion can reach the client before the answer that names its id (the stream and the
job socket are separate connections): while any sent job is still unanswered such a
completion is held by daemon id, and handed to its job once the answer maps it. Held
completions that no answer claims belong to jobs submitted through gRPC (their id is the
daemon's); they are released once every sent job has been answered (or failed).

Not thread-safe: the CompletionTracker's lock guards it.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from typing import Any, Deque, Dict, Iterator, List, Optional, Set

# Set in every client-made job id: the daemon's ids (a counter from 1) never reach it, so a
# client id never equals the id of a job submitted through gRPC. Below the tag's bits 48..62.
CLIENT_JOB_BIT = 1 << 47
_COUNTER_MASK = CLIENT_JOB_BIT - 1
_REMEMBERED = 1 << 16  # answered jobs whose daemon id is remembered (late second deliveries)
HELD = -1              # JobIdMap.route(): kept until an answer names the daemon id
# A session generation's tag in every job id of its sessions (job_tag): bits 48..62.
JOB_TAG_SHIFT = 48
JOB_TAG_MASK = ((1 << 15) - 1) << JOB_TAG_SHIFT
# Job ids handed out already (taken / waited for): a second delivery of the same
# completion (stream and poll) is dropped instead of piling up in the table.
_RECENT_IDS = 1 << 16


def job_tag(generation: int) -> int:
    """The bits a session generation adds to the daemon's job ids (0 for generation 0)."""
    return (int(generation) % (1 << 15)) << JOB_TAG_SHIFT


class RecentIds:
    """A bounded set: remembers the last `limit` ids added."""

    def __init__(self, limit: int = _RECENT_IDS) -> None:
        self._order: Deque[int] = deque()
        self._set: Set[int] = set()
        self._limit = limit

    def add(self, job_id: int) -> None:
        if job_id in self._set:
            return
        self._order.append(job_id)
        self._set.add(job_id)
        while len(self._order) > self._limit:
            self._set.discard(self._order.popleft())

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._set


def job_counter() -> Iterator[int]:
    """1, 2, ...: next() on it is atomic (itertools.count), so threads may share it."""
    return itertools.count(1)


def client_job_id(n: int, tag: int) -> int:
    """The n-th client job id of a session, with its generation's tag."""
    return CLIENT_JOB_BIT | (n & _COUNTER_MASK) | tag


def is_client_job_id(job_id: int) -> bool:
    return bool(int(job_id) & CLIENT_JOB_BIT)


class _Bounded(OrderedDict):
    """A dict that forgets its oldest entries beyond `limit`."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: int, value: int) -> None:
        self[key] = value
        while len(self) > self.limit:
            self.popitem(last=False)


class JobIdMap:
    """Client id <-> daemon id of the jobs sent as job frames (see the module docstring)."""

    def __init__(self, remembered: int = _REMEMBERED) -> None:
        self._unanswered: Set[int] = set()           # client ids sent, answer not read yet
        self._to_client = _Bounded(remembered)       # daemon id -> client id
        self._to_daemon = _Bounded(remembered)       # client id -> daemon id
        self._held: Dict[int, Any] = {}              # daemon id -> completion (see above)

    def sent(self, client_id: int) -> None:
        """The job's frame is about to be written: completions may be held for it now."""
        self._unanswered.add(client_id)

    def unanswered(self, client_id: int) -> bool:
        return client_id in self._unanswered

    def answered(self, client_id: int, daemon_id: int) -> Optional[Any]:
        """The daemon accepted the job as daemon_id: its completion, if it was held."""
        self._unanswered.discard(client_id)
        self._to_client.put(daemon_id, client_id)
        self._to_daemon.put(client_id, daemon_id)
        return self._held.pop(daemon_id, None)

    def settled(self, client_id: int) -> None:
        """The job will never have a daemon id (refused, never sent, connection lost)."""
        self._unanswered.discard(client_id)

    def daemon_id(self, client_id: int) -> Optional[int]:
        return self._to_daemon.get(client_id)

    def route(self, daemon_id: int, completion: Any) -> Optional[int]:
        """The client id a completion of daemon_id belongs to; HELD when it is not known
        yet while jobs are unanswered (it is handed back by answered() or release()); None
        for a job submitted through gRPC (its id is the daemon's)."""
        client_id = self._to_client.get(daemon_id)
        if client_id is None and self._unanswered:
            self._held[daemon_id] = completion
            return HELD
        return client_id

    def release(self) -> List[Any]:
        """The held completions no answer can claim any more (no job is unanswered)."""
        if self._unanswered or not self._held:
            return []
        held, self._held = list(self._held.values()), {}
        return held

    def clear(self) -> None:
        """A new session (another daemon's ids): forget everything."""
        self._unanswered.clear()
        self._to_client.clear()
        self._to_daemon.clear()
        self._held.clear()
