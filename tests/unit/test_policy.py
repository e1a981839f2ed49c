import pytest

from mwrun.head.policy import BACKOFF_CAP, Exit, after_exit, backoff, stops_the_job


def test_backoff_doubles_and_is_capped():
    assert [backoff(1.0, n) for n in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(1.0, 10) == BACKOFF_CAP
    assert backoff(0.0, 3) == 0.0


@pytest.mark.parametrize("policy, code, done, restart, delay", [
    ("never", 1, 0, False, 0.0),
    ("on-failure", 0, 0, False, 0.0),
    ("on-failure", 1, 0, True, 0.5),
    ("on-failure", -9, 1, True, 1.0),
    ("on-failure", 1, 3, False, 0.0),
    ("always", 0, 2, True, 2.0),
    ("always", 0, 3, False, 0.0),
])
def test_after_exit(policy, code, done, restart, delay):
    decision = after_exit(policy, 3, 0.5, done, Exit(code))
    assert (decision.restart, decision.delay) == (restart, delay)


def test_hung_counts_as_a_failure_and_start_errors_are_not_retried():
    assert after_exit("on-failure", 3, 1.0, 0, Exit(-9, hung="no heartbeat for 30s")).restart
    assert not Exit(0, hung="stopped").clean
    decision = after_exit("always", 3, 1.0, 0, Exit(None, start_error="not found"))
    assert not decision.restart and "cannot start" in decision.why
    assert after_exit("always", 3, 1, 3, Exit(1)).why == "no restarts left (max_restarts: 3)"


def test_descriptions():
    assert Exit(1).describe("w") == "w exited with code 1"
    assert Exit(0).describe("w") == "w exited normally"
    assert Exit(-9).describe("w") == "w was killed by SIGKILL"
    assert Exit(-9, hung="stopped for 2s").describe("w") == "w hung (stopped for 2s) and was killed"
    assert Exit(None, start_error="No such file").describe("w") == \
        "w could not start: No such file"


def test_only_failures_stop_the_job():
    assert stops_the_job("stop", Exit(1))
    assert not stops_the_job("stop", Exit(0))
    assert not stops_the_job("isolate", Exit(1))
