"""``mwrun agent`` driven over its stdin/stdout exactly as the head drives it through ssh:
real agent, real children, real frames; no ssh needed for these."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from mwrun.host import frames

SILENCE = 3.0  # the agent's deadline in these tests (the default outlasts a busy head)


def wait_until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)

CHILD = ("import os, sys, time\n"
         "print('hello from', os.getpid(), flush=True)\n"
         "print('cwd', os.getcwd(), 'aff', sorted(os.sched_getaffinity(0)), flush=True)\n"
         "print('env', os.environ.get('MWRUN_TEST'), flush=True)\n"
         "time.sleep(float(sys.argv[1]))\n"
         "sys.exit(int(sys.argv[2]))\n")


class Link:
    """The head's end of an agent's link."""

    def __init__(self, tmp_path, silence: float | None = None):
        env = dict(os.environ)
        self.named = str(tmp_path / "agents" / "agent.sock")  # the agent listens beside it: its own
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "mwrun", "agent", "--host", "h1", "--control",
             self.named, "--silence", str(silence or SILENCE)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env, start_new_session=True)
        self.decoder = frames.Decoder()
        self.pending: list[dict] = []

    def send(self, kind: str, **fields) -> None:
        self.popen.stdin.write(frames.encode({"kind": kind, **fields}))
        self.popen.stdin.flush()

    @property
    def control(self) -> str:
        """The socket this agent listens on, as its hello says."""
        return f"{os.path.splitext(self.named)[0]}-{self.popen.pid}.sock"

    def expect(self, kind: str, timeout: float = 30.0, **match) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, msg in enumerate(self.pending):
                if msg["kind"] == kind and all(msg.get(k) == v for k, v in match.items()):
                    return self.pending.pop(i)
            if time.monotonic() > deadline:
                raise AssertionError(f"no {kind} {match}; got {self.pending}")
            self.send("beat")
            fd = self.popen.stdout.fileno()
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    raise AssertionError(f"agent closed the link; got {self.pending}")
                self.pending.extend(self.decoder.feed(data))

    def lines(self, name: str) -> list[str]:
        out = []
        for msg in list(self.pending):
            if msg["kind"] == "lines" and msg["name"] == name:
                out.extend(msg["lines"])
                self.pending.remove(msg)
        return out

    def spawn(self, name: str, sleep: float, code: int, **extra) -> int:
        self.send("spawn", name=name, argv=[sys.executable, "-c", CHILD, str(sleep), str(code)],
                  env={"MWRUN_TEST": name}, cwd="/", cpus=extra.get("cpus"))
        return self.expect("spawned", name=name)["pid"]

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)
        with contextlib.suppress(BrokenPipeError):  # an agent gone with bytes unread
            self.popen.stdin.close()
        self.popen.stdout.close()  # closed either way: no pipe left to another test


@pytest.fixture
def link(tmp_path):
    made = Link(tmp_path)
    yield made
    made.close()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_hello_spawn_output_and_exit_code(link):
    hello = link.expect("hello")
    assert hello["control"] == link.control
    assert hello["protocol"] == frames.PROTOCOL and hello["host"] == "h1"
    assert hello["inventory"]["cpus"] == sorted(os.sched_getaffinity(0))
    cpu = sorted(os.sched_getaffinity(0))[-1]
    pid = link.spawn("w0", 0, 3, cpus=[cpu])
    exited = link.expect("exited", name="w0")
    assert exited["code"] == 3
    shown = link.lines("w0")
    assert shown[0] == f"hello from {pid}"
    assert shown[1] == f"cwd / aff [{cpu}]"
    assert shown[2] == "env w0"


def test_the_agent_tells_its_clock_and_when_its_processes_started_and_ended(link):
    """What the head's phases of a fault need (head/clocks.py, head/faults.py): the
    agent answers a clock frame at once, and stamps starts and exits with its clock."""
    link.expect("hello")
    before = time.time()
    link.send("clock", sent=12.5)
    answer = link.expect("clock")
    assert answer["sent"] == 12.5 and before <= answer["at"] <= time.time()
    link.send("spawn", name="w0", argv=[sys.executable, "-c", CHILD, "0", "0"],
              env={"MWRUN_TEST": "w0"}, cwd="/", cpus=None)
    spawned_t = link.expect("spawned", name="w0")["t"]
    exited = link.expect("exited", name="w0")
    assert before <= spawned_t <= exited["t"] <= time.time()


def test_a_command_that_cannot_start_is_reported(link):
    link.send("spawn", name="bad", argv=["/nonexistent/python"], env={}, cwd="/", cpus=None)
    failed = link.expect("failed", name="bad")
    assert "No such file" in failed["error"]


def test_signal_reaches_the_process_group(link):
    link.spawn("w0", 60, 0)
    link.send("signal", name="w0", signal=int(signal.SIGTERM))
    assert link.expect("exited", name="w0")["code"] == -signal.SIGTERM


@pytest.mark.parametrize("how", ["link closed", "link silent", "agent killed"])
def test_head_or_agent_gone_leaves_no_process(link, how):
    link.expect("hello")
    pid = link.spawn("w0", 600, 0)
    if how == "link closed":
        link.popen.stdin.close()
    elif how == "agent killed":
        link.popen.kill()
    else:
        pass  # simply stop talking: the agent hears nothing for frames.SILENCE
    # Gone on its own (the process would sleep 600 s): within a turn of the agent, and
    # SILENCE for a silent link, on a quiet machine; the wait leaves room for a busy one.
    wait_until(lambda: gone(pid), timeout=SILENCE + 30)
    wait_until(lambda: link.popen.poll() is not None, timeout=30)


def test_library_messages_are_relayed(link):
    link.expect("hello")
    wait_until(lambda: os.path.exists(link.control), timeout=10)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(link.control)
        sock.sendall(json.dumps({"verb": "heartbeat", "process": "w0", "pid": 1}).encode()
                     + b"\n" + json.dumps({"verb": "stop"}).encode() + b"\n")
        relayed = link.expect("control")
    assert relayed["requests"] == [{"verb": "heartbeat", "process": "w0", "pid": 1}]
    with pytest.raises(AssertionError):
        link.expect("control", timeout=1)  # "stop" is not the library's to send


def test_heartbeats_go_to_the_head_together_and_in_order(link):
    link.expect("hello")
    wait_until(lambda: os.path.exists(link.control), timeout=10)
    said = [{"verb": "hello", "process": p, "pid": i, "interval": 4.0}
            for i, p in enumerate(("w0", "w1"))]
    beats = [{"verb": "heartbeat", "process": p, "pid": i} for i, p in enumerate(("w0", "w1"))]
    world = {"verb": "world", "process": "w0", "pid": 0, "world": "a", "generation": 0,
             "event": "ready", "reason": ""}
    socks = [socket.socket(socket.AF_UNIX) for _ in said]
    try:
        for sock, hello in zip(socks, said, strict=True):
            sock.connect(link.control)
            sock.sendall(json.dumps(hello).encode() + b"\n")
        assert sorted((link.expect("control")["request"] for _ in said),
                      key=lambda r: r["pid"]) == said  # a hello goes at once
        for sock, beat in zip(socks, beats, strict=True):
            sock.sendall(json.dumps(beat).encode() + b"\n")
        # held (a quarter of 4 s, at most HOLD_MAX), then sent as one frame (in the
        # order the agent read its sockets: each process's own messages stay in order),
        # each saying how long it may have been held
        held = link.expect("control")["requests"]
        assert sorted(held, key=lambda r: r["pid"]) == [{**b, "hold": 1.0} for b in beats]
        socks[0].sendall(json.dumps(beats[0]).encode() + b"\n" + json.dumps(world).encode()
                         + b"\n")
        # a message that is not a heartbeat takes the held ones with it, first
        assert link.expect("control")["requests"] == [{**beats[0], "hold": 1.0}]
        assert link.expect("control")["request"] == world
    finally:
        for sock in socks:
            sock.close()


def test_nothing_lost_from_a_chatty_child(tmp_path):
    # Its own link, with a silence no starved test outlasts: while this end decodes
    # 200,000 lines it sends no beat, and on a loaded 2-core machine that took over the
    # 3 s the other tests give (the agent then rightly left its silent head).
    link = Link(tmp_path, silence=120.0)
    try:
        _chatty(link)
    finally:
        link.close()


def _chatty(link) -> None:
    link.expect("hello")
    code = "import sys\nfor i in range(200000): print(i)\n"
    link.send("spawn", name="chatty", argv=[sys.executable, "-c", code], env={}, cwd="/",
              cpus=None)
    link.expect("exited", name="chatty", timeout=60)
    got = link.lines("chatty")
    assert got == [str(i) for i in range(200000)]


def test_a_preload_import_slower_than_the_link_silence_never_stalls_the_agent(link, tmp_path):
    """A warm start waits for its zygote's imports (here three times the link's silence
    limit) while the agent goes on serving: it answers a probe asked after the spawn
    before it answers the spawn (it once blocked in the spawn, silent, and its host was
    taken for lost), then the start is made warm."""
    from tests.helpers import BIN

    link.expect("hello")
    script = tmp_path / "child.py"
    script.write_text("import time\nprint('warm child', flush=True)\ntime.sleep(30)\n")
    env = {"PYTHONPATH": str(BIN / "slow_torch"), "SLOW_TORCH_IMPORT": str(3 * SILENCE),
           "SLOW_TORCH_MARK": str(tmp_path / "mark")}
    link.send("spawn", name="slow", argv=[sys.executable, str(script)], env=env, cwd="/",
              cpus=None, preload=["torch"], warm=["script", str(script), []])
    link.send("probe", name="nobody")
    link.expect("probed", name="nobody", timeout=6 * SILENCE)
    assert not [m for m in link.pending if m["kind"] == "spawned"]  # not answered yet
    spawned = link.expect("spawned", name="slow", timeout=120)
    assert spawned["warm"] is True
    link.send("signal", name="slow", signal=int(signal.SIGKILL))
    link.expect("exited", name="slow", timeout=30)


def test_an_agent_started_again_never_touches_the_old_ones_files(tmp_path):
    """Two agents for one host (the old one stalled while the head started another): each
    listens on its own socket, the old one's end removes only its own, and the last one's
    end leaves no folder behind."""
    old, new = Link(tmp_path), Link(tmp_path)
    try:
        for agent in (old, new):
            agent.expect("hello")
            wait_until(lambda agent=agent: os.path.exists(agent.control), timeout=10)
        assert old.control != new.control
        old.send("stop")
        assert old.popen.wait(timeout=10) == 0
        assert not os.path.exists(old.control)
        assert os.path.exists(new.control)  # still served: its processes keep beating
        new.send("stop")
        assert new.popen.wait(timeout=10) == 0
        assert not os.path.exists(os.path.dirname(new.control))
    finally:
        old.close()
        new.close()


def test_an_agent_stopped_past_the_silence_reads_the_heads_frames_and_stays(link):
    """A host starved of CPU (here: the agent stopped for twice its silence limit while
    the head kept beating) finds the head's frames waiting unread: that silence was its
    own, and it goes on (it once took the head for gone and killed its processes)."""
    link.expect("hello")
    os.kill(link.popen.pid, signal.SIGSTOP)
    try:
        until = time.monotonic() + 2 * SILENCE
        while time.monotonic() < until:
            link.send(frames.Kind.BEAT)  # queued in the pipe, unread
            time.sleep(0.5)
    finally:
        os.kill(link.popen.pid, signal.SIGCONT)
    link.send("probe", name="nobody")
    link.expect("probed", name="nobody", timeout=30)
    assert link.popen.poll() is None


def test_a_start_waiting_for_its_zygote_is_not_made_once_the_job_stops(link, tmp_path):
    """The head's ``stopping`` reaches the agent's queue: a warm start still waiting
    for its zygote's imports is refused, never forked into a stopping job (it was
    forked, unsignalled, and outlived the stop until the head gave up on it)."""
    from tests.helpers import BIN

    link.expect("hello")
    script = tmp_path / "child.py"
    script.write_text("import time\ntime.sleep(60)\n")
    env = {"PYTHONPATH": str(BIN / "slow_torch"), "SLOW_TORCH_IMPORT": "5",
           "SLOW_TORCH_MARK": str(tmp_path / "mark")}
    link.send("spawn", name="queued", argv=[sys.executable, str(script)], env=env, cwd="/",
              cpus=None, preload=["torch"], warm=["script", str(script), []])
    link.send("stopping")  # read next: its zygote is seconds away from ready
    failed = link.expect("failed", name="queued", timeout=60)
    assert "stopping" in failed["error"]
    assert not [m for m in link.pending if m["kind"] == "spawned"]


def test_processes_started_by_an_agent_heed_sigint_and_sighup(link):
    """The agent takes SIGINT and SIGHUP itself (the link's fate decides), but its
    processes get them as any process does: nothing ignored is passed on."""
    link.expect("hello")
    code = ("import signal\n"
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
            " signal.getsignal(signal.SIGHUP) == signal.SIG_DFL, flush=True)\n")
    link.send("spawn", name="w0", argv=[sys.executable, "-c", code], env={}, cwd="/",
              cpus=None)
    link.expect("exited", name="w0")
    assert link.lines("w0") == ["True True"]
