import contextlib
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from mwrun import runs
from tests.helpers import (
    EXIT_WAIT,
    ROOT,
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

# The tests' processes compute on tiny tensors: torch's OpenMP pool (a thread per core
# in each of dozens of processes, spinning between ops) only makes them contend for
# the cores. One thread each, unless the caller chose (the processes inherit it).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The suite runs on parallel workers (pytest-xdist) when ``pytest`` is given folders (or
# nothing: README's command): most tests wait on their processes (torch's imports,
# sockets, timeouts), so more workers than cores pay: 6 were the fastest of 3, 4 and 6
# on the 2-core development machine (bench/README.rst, "The test suite"). Files and
# single tests run in this process, as ``-n 0`` always does; ``-n N`` chooses.
WORKERS = 6


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Workers by default for this project's suite, here rather than in addopts so that
    a machine without pytest-xdist (the GPU one) still runs it, in one process; and
    the groups below kept on any number of workers (``-n N``)."""
    if hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER") \
            or not config.pluginmanager.hasplugin("xdist") \
            or config.inipath != ROOT / "pyproject.toml":
        return
    # The GPU suite alone runs in one process: its tests share the one GPU anyway, and
    # a GPU machine's pytest may carry plugins that refuse to run under xdist
    # (pytest-benchmark warns, and warnings are errors here).
    gpu = ROOT / "tests" / "gpu"
    gpu_only = bool(config.args) and all(Path(arg).resolve().is_relative_to(gpu)
                                         for arg in config.args)
    if config.option.numprocesses is None and not config.option.usepdb \
            and config.option.capture != "no" and not gpu_only \
            and any(os.path.isdir(arg) for arg in config.args):
        config.option.numprocesses = WORKERS
    if config.option.numprocesses and config.option.dist == "no":
        config.option.dist = "loadgroup"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Group what must not run at once; start the ``slow`` tests first, so that no worker
    is left with a long test when the others have finished."""
    for item in items:
        group = _group(item)
        if group is not None and config.pluginmanager.hasplugin("xdist"):
            item.add_marker(pytest.mark.xdist_group(group))
        if group == "slurm":  # it may first wait for another suite's Slurm tests
            own = item.get_closest_marker("timeout")
            own_s = own.args[0] if own is not None and own.args else \
                float(config.getini("timeout") or 0)
            item.add_marker(pytest.mark.timeout(own_s + item.module.slurmbed.LOCK_WAIT))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are gone
def pytest_runtest_teardown(item, nextitem):
    """The Slurm cluster is kept for the tests of its group that follow, no longer."""
    slurmbed = sys.modules.get("tests.integration.slurmbed")
    if slurmbed is not None and (nextitem is None or _group(nextitem) != "slurm"):
        slurmbed.close()


def _group(item) -> str | None:
    """Tests that share something of the machine run one after another, on one worker:
    the Slurm cluster (munge, /etc/hosts, node two's name: every module that imports
    slurmbed) and the one GPU. A test that shares another such thing says so itself,
    with ``@pytest.mark.xdist_group("its name")``."""
    if getattr(getattr(item, "module", None), "slurmbed", None) is not None:
        return "slurm"
    if item.nodeid.startswith("tests/gpu/"):
        return "gpu"
    return None


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
    if not _passed(request):  # what each said, in the failure's report (CI shows no more)
        for proc in started:
            print(f"--- {' '.join(map(str, proc.popen.args))[:200]} (pid {proc.pid}), last lines:\n"
                  + "\n".join(proc.lines[-40:]))
    ended = [p.pid for p in started if p.popen.poll() is not None]
    leaked = settle(lambda: [s for pid in ended for s in session_survivors(pid)],
                    EXIT_WAIT if _passed(request) else 0.0)
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
    if not _passed(request):  # each run's own account, in the failure's report
        for log in sorted(path.glob("runs/*/*.log")):
            lines = log.read_text(errors="replace").splitlines()
            print(f"--- {log.relative_to(path)}, last lines:\n" + "\n".join(lines[-40:]))
    left = settle(lambda: leftovers(path), EXIT_WAIT if _passed(request) else 0.0)
    seen = describe(left)
    for proc in left:  # a failed test must not leave a job running either
        try:  # it may end meanwhile (then its children are found as leftovers below)
            family = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            family = []
        for p in family:
            with contextlib.suppress(psutil.Error):
                p.kill()
    wait_gone(path)
    for run in (path / "runs").glob("*"):  # a killed head's sockets under /tmp
        runs.forget_sockets(run)
    assert not (left and _passed(request)), f"left behind: {seen}"

