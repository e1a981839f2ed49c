import pytest

from mwrun.head.decide.policy import (
    BACKOFF_CAP,
    STABLE_AFTER,
    Exit,
    after_exit,
    backoff,
    crash_loop,
    stops_the_job,
)


def test_first_restart_of_a_crash_loop_is_at_once_then_doubles_capped():
    assert [backoff(1.0, n) for n in range(5)] == [0.0, 1.0, 2.0, 4.0, 8.0]
    assert backoff(1.0, 10) == BACKOFF_CAP
    assert backoff(0.0, 3) == 0.0


def test_a_crash_loop_ends_once_the_process_stayed_joined_long_enough():
    assert crash_loop(3, None, 100.0) == 3  # never joined: still looping
    assert crash_loop(3, 99.0, 100.0) == 3  # joined, but only for a second
    assert crash_loop(3, 100.0 - STABLE_AFTER, 100.0) == 0
    assert crash_loop(0, 10.0, 100.0) == 0


def test_a_healthy_worker_killed_again_and_again_restarts_at_once_every_time():
    # Before: the fourth kill of a healthy worker waited 8 s.
    loop, delays, now = 0, [], 0.0
    for _ in range(4):
        loop = crash_loop(loop, now - 60.0, now)  # up and joined for a minute each time
        decision = after_exit("on-failure", 10, 1.0, len(delays), Exit(-9), loop)
        delays.append(decision.delay)
        loop += decision.restart
        now += 60.0
    assert delays == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("policy, code, done, loop, restart, delay", [
    ("never", 1, 0, 0, False, 0.0),
    ("on-failure", 0, 0, 0, False, 0.0),
    ("on-failure", 1, 0, 0, True, 0.0),
    ("on-failure", 1, 1, 1, True, 0.5),
    ("on-failure", -9, 2, 2, True, 1.0),
    ("on-failure", -9, 2, 0, True, 0.0),  # restarts done count; the delay is the loop's
    ("on-failure", 1, 3, 0, False, 0.0),
    ("always", 0, 2, 3, True, 2.0),
    ("always", 0, 3, 0, False, 0.0),
])
def test_after_exit(policy, code, done, loop, restart, delay):
    decision = after_exit(policy, 3, 0.5, done, Exit(code), loop)
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


def test_a_drills_fault_is_no_crash_loop():
    # Hit again 1 s after it rejoined: a crash loop if it died by itself, but a drill's
    # signal says nothing of the process, so its restart is not delayed.
    assert crash_loop(2, joined_at=10.0, now=11.0) == 2
    assert crash_loop(2, joined_at=10.0, now=11.0, drilled=True) == 0
    assert crash_loop(2, joined_at=None, now=11.0, drilled=True) == 0
