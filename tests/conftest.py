import contextlib
import signal

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

# A shell runs a command it puts in the background (``cmd &``, a CI script started so)
# with SIGINT ignored, and an ignored signal stays ignored in every child, so the
# processes the tests Ctrl-C would not hear it. A user's terminal gives them the
# default: so do the tests (a handler of our own is not inherited; the default is).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Remember whether the test itself failed: its leftovers are then part of that
    failure, cleaned up without a second report (pytest's documented recipe)."""
    report = yield
    if report.when == "call":
        item.mwrun_failed = report.failed
    return report


def _passed(request) -> bool:
    return not getattr(request.node, "mwrun_failed", False)


@pytest.fixture
def procs(request):
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
    leaked = settle(lambda: [s for pid in ended for s in session_survivors(pid)],
                    5.0 if _passed(request) else 0.0)
    seen = describe(leaked)
    for proc in started:
        proc.kill_group()
    for proc in leaked:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    for proc in started:
        proc.close()
    assert_gone([p.pid for p in started] + [p.pid for p in leaked])
    assert not (leaked and _passed(request)), f"left behind by processes that had ended: {seen}"


@pytest.fixture
def home(request, tmp_path):
    """$MWRUN_HOME of a test. Every process of its jobs must be gone once the test is
    over: checked first (a leak fails the test), then killed all the same."""
    path = tmp_path / "home"
    yield path
    left = settle(lambda: leftovers(path), 5.0 if _passed(request) else 0.0)
    seen = describe(left)
    for proc in left:  # a failed test must not leave a job running either
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                p.kill()
    wait_gone(path)
    assert not (left and _passed(request)), f"left behind: {seen}"

