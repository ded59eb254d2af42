"""kvstrata_vllm.staged_loads on its own, over a data path whose loads are jobs that stay in
flight until the test completes them (as CudaPath's daemon jobs do; the CPU engine tests'
host path loads synchronously): the request stays receiving until every part is loaded
and its copies landed, sends no time when it waited (one that did not is an ordinary load),
takes the lease with its last part, and on a give-up reports the units not landed as failed
blocks once the copies in flight landed.
The daemon's answers (which units are in L1) are scripted; no daemon, no vLLM engine."""
from __future__ import annotations

import time
from typing import List, Set

from kvstrata.planning import GiveUp
from kvstrata_vllm.config import parse_config
from kvstrata_vllm.metadata import RequestTransfer, UnitTransfer
from kvstrata_vllm.staged_loads import StagedLoads
from kvstrata_vllm.worker_book import WorkerBook


class Link:
    current = None


class JobPath:
    """A DataPath whose loads are jobs in flight until complete(), as CudaPath's."""

    mode, layer_wise = "cuda", False

    def __init__(self, book: WorkerBook) -> None:
        self.book = book
        self.parts: List[RequestTransfer] = []
        self.leases: List[int] = []      # the lease each part consumed (0: none)
        self.busy: Set[str] = set()

    def load(self, req: RequestTransfer) -> None:
        self.parts.append(req)
        self.leases.append(self.book.take_lease(req))
        self.busy.add(req.req_id)

    def complete(self) -> None:   # CudaPath._complete: the request's last job is done
        with self.book.lock:
            for r in self.busy:
                self.book.timed_locked((r,), type("C", (), {"elapsed_us": 1000})())
                self.book.recved.add(r)
        self.busy.clear()

    def busy_locked(self, kind: str, req_id: str) -> bool:
        return kind == "load" and req_id in self.busy


def setup(ready: List[int], deadline_ms: float = 10_000.0):
    book = WorkerBook(parse_config({}), Link(), [object()], 0, False)
    io = JobPath(book)
    staged = StagedLoads(book)
    answers = list(ready)
    staged._ready = lambda st: answers.pop(0) if answers else 0
    req = RequestTransfer("r", [UnitTransfer(bytes([i]) * 32, [10 + i]) for i in range(6)],
                          leases={0: 77}, give_up=GiveUp(((0, deadline_ms),)))
    return book, io, staged, req


def step(book, io, staged):
    """What WorkerSide.get_finished does."""
    staged.poll(io)
    staged.settle(io)
    return book.finished(io.busy_locked)


def test_parts_load_as_units_reach_l1_and_the_request_waits_for_all():
    book, io, staged, req = setup([2, 0, 4])
    staged.start(req, io)
    assert [len(p.units) for p in io.parts] == [2] and io.leases == [0]
    io.complete()                              # the first part landed: still receiving
    assert step(book, io, staged) == (None, None)
    time.sleep(0.006)
    assert step(book, io, staged) == (None, None)   # asked: nothing new in L1
    time.sleep(0.006)
    assert step(book, io, staged) == (None, None)   # the rest: the last part, in flight
    assert [len(p.units) for p in io.parts] == [2, 4]
    assert io.leases == [0, 77]                     # the last part takes the lease
    io.complete()
    assert step(book, io, staged) == (None, {"r"})
    # It waited: no time (its parts' are L1 copies; the scheduler's watch times the tier).
    assert not book.load_ms and not book.untimed
    assert not book.invalid and not book.gave_up and not staged


def test_a_load_whose_units_are_all_in_l1_is_an_ordinary_load():
    book, io, staged, req = setup([6])
    staged.start(req, io)
    assert [len(p.units) for p in io.parts] == [6] and io.leases == [77]
    io.complete()
    assert step(book, io, staged) == (None, {"r"})
    assert book.load_ms == [(("r",), 1.0)]           # its one part's (the daemon's) time


def test_a_give_up_fails_the_rest_once_the_copies_in_flight_landed():
    book, io, staged, req = setup([2], deadline_ms=20.0)
    staged.start(req, io)
    time.sleep(0.03)
    assert step(book, io, staged) == (None, None)   # gave up; a part still in flight
    assert book.invalid == {12, 13, 14, 15}
    (report,) = book.gave_up
    assert report[:3] == ("r", 2, 6) and report[3] >= 20.0 and report[4] == 20.0
    assert book.stats.take().data == {"load_gave_up_units": 4}
    io.complete()
    assert step(book, io, staged) == (None, {"r"})
    assert not book.load_ms                          # a give-up is no time sample
    assert not staged


def test_a_finished_request_stops_loading():
    book, io, staged, req = setup([0])
    staged.start(req, io)
    staged.drop({"r"})
    assert step(book, io, staged) == (None, {"r"})
    assert not io.parts and not staged


def test_an_idle_step_waits_no_longer_than_a_staged_loads_polls():
    """A step without a forward pass waits for the loads in flight (up to the scheduler's
    idle_wait_ms, 20 ms without a prediction); while a staged load runs, at most POLL_S,
    so its asks of the daemon and its deadline keep their pace."""
    from kvstrata_vllm.staged_loads import POLL_S

    book, io, staged, req = setup([2, 0, 4])
    assert staged.idle_wait(0.02) == 0.02
    staged.start(req, io)
    assert staged.idle_wait(0.02) == POLL_S and staged.idle_wait(0.001) == 0.001
