"""``mwrun launch --detach``: planned once, its console bounded, and never left running
by a parent that gave up on it."""

import json
import os
import sys

import pytest

from mwrun.errors import RunError
from mwrun.head import bringup
from mwrun.head.observe import console
from mwrun.head.serve import control
from mwrun.keeper import pending
from mwrun.plan import ports
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W
from tests.helpers import wait_gone
from tests.integration.jobs import cli, status, wait_for, write_star

pytestmark = pytest.mark.timeout(120)
IDLE = json.dumps([sys.executable, "-c", "import time; time.sleep(600)"])


@pytest.fixture
def job(home, tmp_path, monkeypatch):
    monkeypatch.setenv("MWRUN_HOME", str(home))
    path = tmp_path / "job.yaml"
    path.write_text(f"version: 1\nname: job\nprocesses:\n  a: {{cmd: {IDLE}}}\n"
                    f"  b: {{cmd: {IDLE}}}\nworlds:\n  w1: {{members: [a, b]}}\n"
                    "  w2: {members: [b, a]}\n")
    return path


@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
def test_the_background_supervisor_uses_the_plan_checked_in_the_terminal(job, home, monkeypatch,
                                                                        capsys):
    monkeypatch.setattr(bringup, "FORM_WAIT", 1.0)  # plain sleepers: their worlds never form
    chosen = []
    bind_free = ports.bind_free

    def recording(addr, taken):
        sock = bind_free(addr, taken)
        chosen.append(sock.getsockname()[1])
        return sock

    monkeypatch.setattr(ports, "bind_free", recording)
    run, code = bringup.detach(str(job), "bg", 5.0)
    assert code == 0
    state = json.loads((home / "runs" / run / "state.json").read_text())
    assert sorted(w["port"] for w in state["worlds"]) == sorted(chosen)
    assert "run bg: 2 processes in 2 worlds" in (home / "runs" / run / "supervisor.log").read_text()
    said = capsys.readouterr().err  # what it waited for, and that it gave up waiting
    assert "mwrun | waiting for 2 worlds to form: w1, w2" in said
    assert "mwrun | w1, w2 had not formed after 1s; the run goes on (mwrun status bg" in said
    control.request(state["control"], {"verb": "stop"})
    wait_for(lambda: json.loads((home / "runs" / run / "state.json").read_text())["state"]
             == "finished", 30, "the run to finish")
    # Its end waits for the stores' torch import, still under way on a loaded machine
    # (an import cannot be cut short): pending.CLOSE_WAIT at most.
    wait_gone(home, timeout=pending.CLOSE_WAIT)


def test_a_parent_that_gives_up_waiting_leaves_nothing_running(job, home, monkeypatch):
    monkeypatch.setattr(bringup, "DETACH_WAIT", 0.0)
    with pytest.raises(RunError, match="did not start within 0s; it was stopped"):
        bringup.detach(str(job), "given-up", 5.0)
    wait_gone(home)


def test_the_detached_console_is_rotated(tmp_path, monkeypatch):
    monkeypatch.setattr(console, "LOG_BYTES", 1000)
    path = tmp_path / "supervisor.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    spare = os.dup(fd)  # stands in for stderr
    out = console.RotatedOutput(path, (fd, spare))
    for i in range(100):
        out.write(f"line {i:03d} {'.' * 40}\n")
    os.write(spare, b"traceback\n")  # stderr follows the rotation
    for held in (fd, spare):
        os.close(held)
    assert path.stat().st_size <= 1000 + len("traceback\n")
    assert (tmp_path / "supervisor.log.1").stat().st_size <= 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["supervisor.log", "supervisor.log.1"]
    text = path.read_text()
    assert "line 099" in text and text.endswith("traceback\n")


def test_detach_fails_at_once_naming_processes_that_never_ran(home, tmp_path):
    # They cannot start (a module that is not there, which validate cannot see: a
    # script that is not there is a topology error now, exit 2): no process ever runs,
    # no world can form.
    missing = json.dumps([sys.executable, "-c", "import no_such_module_here"])
    path = tmp_path / "missing.yaml"
    path.write_text(f"version: 1\nname: missing\nprocesses:\n  a: {{cmd: {missing}}}\n"
                    f"  b: {{cmd: {missing}}}\nworlds:\n  w1: {{members: [a, b]}}\n")
    result = cli(home, "launch", str(path), "--detach", "--run-id", "missing")
    assert result.returncode == 1, (result.stdout, result.stderr)
    said = result.stderr
    assert "every world formed" not in said
    # At once: the first failure is enough (the other may not have happened yet).
    assert " failed before " in said and "mwrun logs PROCESS missing shows why:" in said
    # Said plainly: why it could not start, in its own words, and that it is not retried.
    why = (" could not start: ModuleNotFoundError: No module named 'no_such_module_here';"
           " a command that cannot start is not retried")
    assert f"\n  a{why}" in said or f"\n  b{why}" in said, said
    wait_gone(home)


def test_detach_refuses_a_script_that_is_not_there_and_starts_nothing(home, tmp_path):
    missing = json.dumps([sys.executable, str(tmp_path / "no-such-script.py")])
    path = tmp_path / "missing.yaml"
    path.write_text(f"version: 1\nname: missing\nprocesses:\n  a: {{cmd: {missing}}}\n"
                    f"  b: {{cmd: {IDLE}}}\nworlds:\n  w1: {{members: [a, b]}}\n")
    result = cli(home, "launch", str(path), "--detach", "--run-id", "missing")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"{path}:4:12: process 'a': cmd: python cannot open" \
           f" {tmp_path / 'no-such-script.py'}: no such file" in result.stderr, result.stderr
    assert "nothing was started" in result.stderr
    assert not (home / "runs" / "missing").exists()


@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
def test_detach_says_it_cannot_tell_for_plain_scripts_and_returns(job, home, monkeypatch,
                                                                  capsys):
    # Plain sleepers: no member joins through the library, no group shows in a store.
    monkeypatch.setattr(bringup, "QUIET", 3.0)  # how long they run unheard first
    monkeypatch.setattr(bringup, "SAY_EVERY", 1.0)
    run, code = bringup.detach(str(job), "plain", 5.0)
    assert code == 0
    said = capsys.readouterr().err
    assert "mwrun | waiting for 2 worlds to form: w1, w2\n" in said
    # (the line a long wait repeats is timed in test_bringup: here a loaded machine may
    # answer the second look only once the verdict is due)
    assert "mwrun | mwrun cannot tell whether w1, w2 will form: no member joins them" \
        " through mwrun's library" in said, said
    assert "every world formed" not in said
    state = json.loads((home / "runs" / run / "state.json").read_text())
    assert state["state"] in (R.STARTING, R.RUNNING)  # it goes on: told, not stopped
    control.request(state["control"], {"verb": "stop"})
    wait_gone(home, timeout=pending.CLOSE_WAIT)


def test_detach_returns_once_every_world_formed(home, tmp_path):
    result = cli(home, "launch", str(write_star(tmp_path, workers=1)), "--detach",
                 "--run-id", "formed")
    assert result.returncode == 0, result.stderr
    assert "mwrun | every world formed" in result.stderr
    assert "started run formed in the background" in result.stdout
    doc = status(home, "formed")
    assert [w["state"] for w in doc["worlds"]] == [W.HEALTHY]
    cli(home, "stop", "formed", check=True)
    wait_gone(home, timeout=pending.CLOSE_WAIT)
