"""The benches' one way to wait on their job (bench/common.py): a wait ends at once,
saying why, when the job will not come, and only then or at its timeout."""

import os

import pytest

from bench.common import NotStarted, run_over, wait_for


def test_a_wait_returns_what_it_found():
    assert wait_for(lambda: {"doc": 1}, lambda: "never asked", 60, "x") == {"doc": 1}


def test_a_wait_on_a_job_that_will_not_come_ends_at_once_with_its_reason():
    asked = []

    def found():
        asked.append(1)
        return None

    with pytest.raises(NotStarted) as raised:
        wait_for(found, lambda: "mwrun launch exited with status 2: refused", 600,
                 "every world healthy")
    assert str(raised.value) == ("every world healthy: never, mwrun launch exited with"
                                 " status 2: refused")
    assert asked == [1]  # asked once, then told: the 600 s were never waited


def test_a_wait_that_runs_out_says_what_was_not_seen():
    with pytest.raises(NotStarted, match="every world healthy: not seen in 0 s"):
        wait_for(lambda: None, lambda: None, 0, "every world healthy")


def test_not_started_ends_a_bench_like_system_exit():
    assert issubclass(NotStarted, SystemExit)


@pytest.mark.parametrize("state", ["failed", "finished", "lost"])
def test_a_run_in_a_final_state_is_over(state):
    assert run_over({"run_id": "r", "state": state}) == f"run r is {state}"


def test_a_running_run_whose_head_lives_is_not_over():
    doc = {"run_id": "r", "state": "running", "supervisor_pid": os.getpid(),
           "started_at": 4e9}
    assert run_over(doc) is None
    assert run_over(None) is None  # no document yet: it may still come


def test_a_running_run_whose_head_is_gone_is_over():
    # This pid, but a process started after the run did: the head's pid taken again.
    doc = {"run_id": "r", "state": "running", "supervisor_pid": os.getpid(),
           "started_at": 0.0}
    assert run_over(doc) == f"run r: its head (pid {os.getpid()}) is gone"
