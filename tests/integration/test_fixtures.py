"""The leak checks of the procs and home fixtures look before they clean up: a test
that leaves a process behind fails (run here as an inner pytest on real processes)."""

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT, assert_gone

pytestmark = pytest.mark.timeout(90)

INNER = """\
import os, subprocess, sys

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_a_job_process_outlives_the_test(home):
    home.mkdir()
    child = subprocess.Popen(SLEEPER, env={**os.environ, "MWRUN_HOME": str(home)},
                             start_new_session=True)
    print(f"pid {child.pid}", flush=True)


def test_an_ended_process_leaves_its_child_running(procs):
    # (its child writes elsewhere: holding the parent's pipe, it would make the wait
    # for the parent's last lines sit out its timeout)
    spawn = ("import subprocess as s; print(s.Popen(%r, stdout=s.DEVNULL, stderr=s.DEVNULL)"
             ".pid, flush=True)" % SLEEPER)
    parent = procs.start([sys.executable, "-c", spawn])
    assert parent.wait() == 0
    print(f"pid {parent.lines[0]}", flush=True)


def test_a_failed_test_is_reported_once(home):
    home.mkdir()
    child = subprocess.Popen(SLEEPER, env={**os.environ, "MWRUN_HOME": str(home)},
                             start_new_session=True)
    print(f"pid {child.pid}", flush=True)
    assert child.pid < 0, "the test's own failure"


def test_a_clean_test_passes(procs, home):
    assert procs.start([sys.executable, "-c", "pass"]).wait() == 0
"""


def test_leaks_fail_the_test_and_are_still_cleaned_up(tmp_path):
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                             "-p", "tests.conftest",
                             "--rootdir", str(tmp_path), "-c", os.devnull, str(inner)],
                            cwd=ROOT, capture_output=True, text=True, timeout=80,
                            env={**os.environ, "MWRUN_TEST_EXIT_WAIT": "2"})  # leaks: short
    out = result.stdout
    # each leak of a passing test: an error at its teardown; a failed test: its failure
    assert "1 failed, 3 passed, 2 errors" in out, out
    assert "the test's own failure" in out and "ERROR at teardown of test_a_failed" not in out
    assert "ERROR at teardown of test_a_job_process_outlives_the_test" in out, out
    assert "AssertionError: left behind: [(" in out, out
    assert "ERROR at teardown of test_an_ended_process_leaves_its_child_running" in out, out
    assert "left behind by processes that had ended: [(" in out, out
    leaked = [int(pid) for pid in re.findall(r"pid (\d+)", out)]
    assert len(leaked) == 3, out
    assert_gone(leaked)  # found, and then killed all the same
