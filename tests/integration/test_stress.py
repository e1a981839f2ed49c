"""Under stress the supervisor never stalls and never leaves a process behind: a child
flooding its output, a console nobody reads, greedy and malformed control clients,
grandchildren that ignore SIGTERM."""

import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from mwrun.head.serve import control
from tests.helpers import BIN, wait_gone
from tests.integration.jobs import proc_state, wait_for, wait_status

pytestmark = pytest.mark.timeout(120)
PY = sys.executable
IDLE = [PY, "-c", "import time; time.sleep(600)"]
CRASH = [PY, "-c", "import time; time.sleep(2); raise SystemExit(3)"]


def topology(tmp_path, **processes):
    procs = "\n".join(f"  {name}: {{cmd: {json.dumps(cmd)}}}" for name, cmd in processes.items())
    path = tmp_path / "job.yaml"
    path.write_text(f"version: 1\nname: job\nprocesses:\n{procs}\n"
                    f"worlds:\n  w: {{members: [{', '.join(processes)}]}}\n")
    return path


def start(home, path, *extra, stdout=subprocess.DEVNULL):
    """mwrun launch without the test's PYTHONUNBUFFERED, its console where told."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(MWRUN_HOME=str(home), NO_COLOR="1")
    return subprocess.Popen([PY, "-m", "mwrun", "launch", str(path), "--run-id", "job",
                             *extra],
                            stdout=stdout, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def running(home, pids: bool = False):
    """The run's status once it runs; with ``pids``, once every process's start has been
    answered too (each start is its host's agent's, answered a moment later; only for
    processes that never end: one that has ended shows none)."""
    wait_for(lambda: (home / "runs" / "job" / "state.json").exists(), 60, "the run's state")
    return wait_status(home, lambda d: d["state"] == "running"
                       and (not pids or all(p["pid"] for p in d["processes"])), "the run",
                       run="job")


def ask(home, message, timeout=10.0):
    return control.request(running_path(home), message, timeout=timeout)


def running_path(home):
    return json.loads((home / "runs" / "job" / "state.json").read_text())["control"]


def log_size(home, name):
    path = home / "runs" / "job" / "logs" / f"{name}.log"
    return path.stat().st_size if path.exists() else 0


def served_while(home, busy):
    """Once ``busy()`` holds: status answers, sees the crasher fail, and a stop ends the
    run; returns the launcher's exit status."""
    wait_for(busy, 30, "the flood to reach the supervisor")
    doc = wait_for(lambda: (d := ask(home, {"verb": "status"}, timeout=10)["status"])
                   and proc_state(d, "crasher")["state"] == "failed" and d, 30,
                   "the crash to be handled")
    assert proc_state(doc, "flood")["state"] in ("starting", "running")
    assert ask(home, {"verb": "stop"}, timeout=10)["ok"]


def test_a_flooding_child_and_a_console_nobody_reads_never_stall_supervision(home, tmp_path):
    # Either one alone stalled the loop: reading a pipe that never ran dry, or writing
    # to a terminal that never took the lines (`mwrun launch ... | sleep 90`).
    read, write = os.pipe()
    job = start(home, topology(tmp_path, flood=[PY, str(BIN / "flood.py")], crasher=CRASH),
                stdout=write)
    os.close(write)
    try:
        running(home)
        served_while(home, lambda: log_size(home, "flood") > 1 << 20)
        assert job.wait(timeout=30) == 1  # the crasher failed for good
        wait_gone(home)
        logs = home / "runs" / "job" / "logs"
        size = sum(p.stat().st_size for p in logs.glob("flood.log*"))
        assert size > 1 << 20  # the log got what the console could not take
    finally:
        job.kill()
        job.wait()
        os.close(read)


def test_greedy_and_malformed_control_clients_change_nothing(home, tmp_path):
    job = start(home, topology(tmp_path, a=IDLE, b=IDLE))
    try:
        doc = running(home, pids=True)
        pids = {p["name"]: p["pid"] for p in doc["processes"]}
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(running_path(home))
            with sock.makefile("rb") as stream:
                for line in (b'{"verb": ["status"]}', b'{"verb": "kill_world", "world": 1}',
                             b'{"verb": "kill_world", "world": "w", "rank": "0"}', b"[]",
                             b"[" * 500000, b'{"verb": "stop", "x": 1', b"\xff"):
                    sock.sendall(line + b"\n")
                    reply = json.loads(stream.readline())
                    assert reply["ok"] is False and reply["error"], line
                for line in (b'{"verb": "hello", "process": ["a"], "pid": 1}',
                             b'{"verb": "heartbeat", "process": "a", "pid": "x"}',
                             b'{"verb": "world", "process": "a", "pid": %d, "world": "w",'
                             b' "generation": [], "event": "broken"}' % pids["a"],
                             b'{"verb": "hello", "process": "a", "pid": %d, "interval": 1e999}'
                             % pids["a"]):
                    sock.sendall(line + b"\n")  # no reply to these: the next line answers
                sock.sendall(b'{"verb": "status"}\n')
                after = json.loads(stream.readline())["status"]
        assert {p["name"]: p["pid"] for p in after["processes"]} == pids
        assert [w["breaks"] for w in after["worlds"]] == [0]

        greedy = socket.socket(socket.AF_UNIX)
        greedy.connect(running_path(home))
        greedy.settimeout(30)
        greedy.sendall(b'{"verb": "status"}\n' * 5000)  # and reads no reply for now
        assert ask(home, {"verb": "status"}, timeout=10)["ok"]  # a stalled loop: minutes
        wait_for(lambda: greedy_dropped(greedy), 30, "the greedy client to be dropped")
        greedy.close()
        assert ask(home, {"verb": "stop"})["ok"]
        assert job.wait(timeout=30) == 0
        wait_gone(home)
    finally:
        job.kill()
        job.wait()


def test_no_grandchild_outlives_its_process_or_the_run(home, tmp_path):
    gone_first, left_last = tmp_path / "first.pid", tmp_path / "last.pid"
    forker = [PY, str(BIN / "forker.py")]
    job = start(home, topology(tmp_path, first=[*forker, str(gone_first), "--exit"],
                               last=[*forker, str(left_last)]))
    try:
        wait_for(lambda: gone_first.exists() and left_last.exists(), 30, "the grandchildren")
        first, last = int(gone_first.read_text()), int(left_last.read_text())
        # Its leader was reaped: the grandchild that ignores SIGTERM goes with it.
        wait_for(lambda: not alive(first), 10, f"grandchild {first} of a reaped process to go")
        assert alive(last)
        job.send_signal(signal.SIGINT)  # Ctrl-C: SIGTERM to every group, the leader dies
        assert job.wait(timeout=30) == 1  # 'first' was SIGKILLed: a failure
        assert not alive(last)
        wait_gone(home)
        log = (home / "runs" / "job" / "logs" / "first.log").read_text()
        assert "last words before SIGKILL" in log  # PYTHONUNBUFFERED: no line is lost
    finally:
        job.kill()
        job.wait()


FREEZER = Path("/sys/fs/cgroup/freezer")


@pytest.mark.skipif(os.geteuid() != 0 or not FREEZER.is_dir(),
                    reason="needs root and the cgroup v1 freezer to make SIGKILL wait")
def test_a_process_that_cannot_be_killed_ends_the_run_failed_not_hung(home, tmp_path):
    # A frozen task takes SIGKILL only when thawed: it stands for one stuck in the kernel.
    group = FREEZER / f"mwrun-test-{os.getpid()}"
    group.mkdir()
    job = start(home, topology(tmp_path, a=IDLE, b=IDLE), "--grace", "0.1")
    pid = None
    try:
        pid = proc_state(running(home, pids=True), "a")["pid"]
        (group / "cgroup.procs").write_text(str(pid))
        (group / "freezer.state").write_text("FROZEN")
        wait_for(lambda: (group / "freezer.state").read_text().strip() == "FROZEN", 10,
                 "the freeze")
        assert ask(home, {"verb": "stop"})["ok"]
        assert job.wait(timeout=40) == 1  # it ends, and says the job failed
        events = (home / "runs" / "job" / "events.log").read_text()
        assert f"a (pid {pid}) did not die; giving up" in events
        doc = json.loads((home / "runs" / "job" / "state.json").read_text())
        assert proc_state(doc, "a")["state"] == "failed"
    finally:
        (group / "freezer.state").write_text("THAWED")
        if pid is not None:
            wait_for(lambda: not alive(pid), 10, "the thawed process to die")
        group.rmdir()
        job.kill()
        job.wait()


def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def greedy_dropped(sock):
    """The server closed its end (seen without reading the replies)."""
    poller = select.poll()
    poller.register(sock, select.POLLRDHUP)
    return any(event & select.POLLRDHUP for _, event in poller.poll(0))
