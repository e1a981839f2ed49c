"""What py-spy gives of a hung member from outside (host/spy.py), as README says: native
frames (the C call it is in) for one that runs, and for one that is stopped only its
Python frames (native frames need the process paused, which a stopped one cannot be)."""

import selectors
import signal
import subprocess
import sys
import time

import psutil
import pytest

from mwrun.host import spy
from tests.helpers import ROOT
from tests.integration.jobs import wait_for

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(spy.find()[0] is None, reason="py-spy is not installed")]

SLEEPER = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.05)\n"


def capture(pid: int, native: bool) -> dict:
    """One capture as the post-mortem asks it, driven to its answer."""
    answers = {}
    with selectors.DefaultSelector() as selector:
        spies = spy.Spies(selector, time.monotonic, lambda key, _, result:
                          answers.setdefault(key, result))
        assert spies.capture("k", pid, native, 20.0) is None
        while "k" not in answers:
            for key, _ in selector.select(0.5):
                callback, arg = key.data
                callback(arg)
            spies.tick()
    return answers["k"]


def files(result: dict) -> set[str]:
    return {frame[0].rsplit("/", 1)[-1] for t in result["threads"] for frame in t["stack"]}


def test_native_frames_of_a_running_member_and_python_frames_of_a_stopped_one():
    with subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            running = capture(child.pid, native=True)
            assert running["error"] is None and running["by"] == "py-spy --native"
            assert any(name.startswith("libc") for name in files(running)), running
            child.send_signal(signal.SIGSTOP)  # as a drill's STOP leaves a member
            # The stop lands when the child is next scheduled: until then it runs, and
            # native frames are read (CI pair 28, two suites loading the machine).
            wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_STOPPED,
                     20, "the child stopped")
            stopped = capture(child.pid, native=True)
            assert stopped["error"] is None and stopped["by"] == "py-spy", stopped
            assert "<string>" in files(stopped)
            assert not any(name.startswith("libc") for name in files(stopped))
        finally:
            child.kill()


def test_readme_says_what_a_stopped_member_gives():
    text = " ".join((ROOT / "README.rst").read_text().split())
    assert "with native frames for the hung one if it runs (py-spy cannot pause a stopped" \
        " one for them: its Python frames only)" in text
