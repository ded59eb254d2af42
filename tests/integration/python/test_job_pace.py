"""kvstrata.job_pace: when a job's completion is due, from the jobs before it."""
from kvstrata.job_pace import JobPace

LOAD, STORE = 2, 1


def test_nothing_is_due_before_a_job_of_its_kind_completed() -> None:
    pace = JobPace()
    assert pace.due(LOAD, 64) is None
    pace.learn(STORE, 64, 0.002)
    assert pace.due(LOAD, 64) is None
    assert pace.due(STORE, 128) == 0.004


def test_a_faster_job_sets_the_pace_and_a_slower_one_drifts_it() -> None:
    pace = JobPace()
    pace.learn(LOAD, 100, 0.010)           # 100 us per block
    pace.learn(LOAD, 100, 0.005)           # faster: taken as it is
    assert abs(pace.due(LOAD, 10) - 0.0005) < 1e-12
    pace.learn(LOAD, 100, 0.015)           # slower: a tenth of the way
    assert abs(pace.due(LOAD, 10) - 0.0006) < 1e-12


def test_jobs_without_blocks_or_time_teach_nothing() -> None:
    pace = JobPace()
    pace.learn(LOAD, 0, 0.01)
    pace.learn(LOAD, 10, 0.0)
    assert pace.due(LOAD, 10) is None
