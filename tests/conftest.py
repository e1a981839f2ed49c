import contextlib

import psutil
import pytest

from tests.helpers import (
    Proc,
    assert_gone,
    describe,
    leftovers,
    session_survivors,
    settle,
    wait_gone,
)


@pytest.fixture
def procs():
    """Start processes with procs.start(args). After the test, a process that had ended
    must have left nothing of its session behind (checked first: a leak fails the
    test); then every process is killed, as a failed test may leave them running."""

    class Started(list):
        def start(self, args, **kwargs) -> Proc:
            proc = Proc(args, **kwargs)
            self.append(proc)
            return proc

    started = Started()
    yield started
    ended = [p.pid for p in started if p.popen.poll() is not None]
    leaked = settle(lambda: [s for pid in ended for s in session_survivors(pid)])
    seen = describe(leaked)
    for proc in started:
        proc.kill_group()
    for proc in leaked:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    for proc in started:
        proc.close()
    assert_gone([p.pid for p in started] + [p.pid for p in leaked])
    assert not leaked, f"left behind by processes that had ended: {seen}"


@pytest.fixture
def home(tmp_path):
    """$MWRUN_HOME of a test. Every process of its jobs must be gone once the test is
    over: checked first (a leak fails the test), then killed all the same."""
    path = tmp_path / "home"
    yield path
    left = settle(lambda: leftovers(path))
    seen = describe(left)
    for proc in left:  # a failed test must not leave a job running either
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                p.kill()
    wait_gone(path)
    assert not left, f"left behind: {seen}"

