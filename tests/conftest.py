import contextlib

import psutil
import pytest

from tests.helpers import Proc, assert_gone, leftovers, wait_gone


@pytest.fixture
def procs():
    """Start processes with procs.start(args); all are killed and checked gone after."""

    class Started(list):
        def start(self, args, **kwargs) -> Proc:
            proc = Proc(args, **kwargs)
            self.append(proc)
            return proc

    started = Started()
    yield started
    for proc in started:
        proc.kill_group()
    for proc in started:
        proc.close()
    assert_gone([p.pid for p in started])


@pytest.fixture
def home(tmp_path):
    """$MWRUN_HOME of a test; every process of its jobs is gone afterwards."""
    path = tmp_path / "home"
    yield path
    for proc in leftovers(path):  # a failed test must not leave a job running
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                p.kill()
    wait_gone(path)


