"""Real processes for integration tests: started in their own session, read line by
line, and checked to be gone afterwards."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "tests" / "bin"


# A port a test names before anything listens on it (by-hand worlds, a metrics
# endpoint) is drawn below the kernel's ephemeral range, so no connection's source port
# or port-0 listener of this suite can take it meanwhile, and is reserved by a file for
# PORT_HOLD seconds, so neither this suite's other workers nor a second suite beside it
# (CI runs two) hands it out again while a test may still use it. A port once found
# free with bind(0) was taken before its test listened about once in twenty full runs.
PORT_HOLD = 900.0
PORT_MARKS = Path("/tmp/mwrun-test-ports")
_marked: list[Path] = []  # this process's reservations, let go when it exits


@atexit.register
def _unmark() -> None:
    for mark in _marked:
        with contextlib.suppress(OSError):
            mark.unlink()
    with contextlib.suppress(OSError):
        PORT_MARKS.rmdir()  # only once no suite holds a port


def _port_range() -> range:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(10000, max(low, 12000))


def free_port() -> int:
    PORT_MARKS.mkdir(exist_ok=True)
    ports, now = _port_range(), time.time()
    for _ in range(500):
        port = random.choice(ports)
        mark = PORT_MARKS / str(port)
        try:
            os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileNotFoundError:  # a suite ending beside this one removed the folder
            PORT_MARKS.mkdir(exist_ok=True)
            continue
        except FileExistsError:
            with contextlib.suppress(OSError):
                if now - mark.stat().st_mtime > PORT_HOLD:
                    mark.unlink()  # a reservation long past: the next draw may take it
            continue
        _marked.append(mark)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use by something else: drawn again by no test of this one
        return port
    raise RuntimeError(f"no free port found under {PORT_MARKS}")


def store_server():
    """A real TCPStore server on 127.0.0.1 and its port, bound here on port 0: a port
    found free first can be taken by another test before the store binds it."""
    import torch.distributed as dist

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    return dist.TCPStore("127.0.0.1", port, None, True, wait_for_workers=False,
                         master_listen_fd=listener.detach()), port


class Proc:
    """A child process whose stdout lines (JSON where they parse) arrive in a queue."""

    def __init__(self, args: list[str], env: dict | None = None, cwd=None):
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.popen = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      env=full_env, cwd=cwd, start_new_session=True, text=True)
        self.pid = self.popen.pid
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.popen.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, predicate, timeout: float = 30.0):
        """The first new line (parsed as JSON when it is) for which predicate is true."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; output so far:\n{self.output()}")
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"process ended (rc={self.popen.wait()}) before the"
                                     f" expected line; output:\n{self.output()}")
            value = _parse(line)
            if predicate(value):
                return value

    def expect_key(self, key: str, timeout: float = 30.0):
        return self.expect(lambda v: isinstance(v, dict) and key in v, timeout)

    def wait(self, timeout: float = 60.0) -> int:
        rc = self.popen.wait(timeout=timeout)
        self._reader.join(timeout=30)  # its last lines, even on a loaded machine
        return rc

    def close(self) -> None:
        """Reap the process and release its pipe (after it has exited)."""
        self.popen.wait(timeout=10)
        self._reader.join(timeout=30)  # its last lines, even on a loaded machine
        self.popen.stdout.close()

    def records(self) -> list[dict]:
        return [v for v in map(_parse, self.lines) if isinstance(v, dict)]

    def output(self) -> str:
        return "\n".join(self.lines)

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)


def prefixed(name: str):
    """A predicate factory for launch output: JSON lines of process ``name``."""
    def parse(line):
        if not isinstance(line, str) or " | " not in line:
            return None
        who, _, text = line.partition(" | ")
        if who.strip() != name:
            return None
        value = _parse(text)
        return value if isinstance(value, dict) else None
    return parse


def leftovers(home) -> list[psutil.Process]:
    """Every process (but this one) started with MWRUN_HOME=home: supervisor, watchdog,
    children and their restarts all inherit it."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and proc.environ().get("MWRUN_HOME") == str(home) \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def session_survivors(leader: int) -> list[psutil.Process]:
    """Live processes of the session ``leader`` started (it led one: start_new_session),
    other than the leader itself."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):  # gone meanwhile
            if proc.pid != leader and os.getsid(proc.pid) == leader \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


# How long processes on their way out (a run that has ended, a group just killed) may
# take to be gone: a fraction of a second on a quiet machine, seconds on a busy one.
# Only a leak waits it out. (The fixtures' own test sets it short in an inner run.)
EXIT_WAIT = float(os.environ.get("MWRUN_TEST_EXIT_WAIT", "30"))


def settle(find, timeout: float = EXIT_WAIT) -> list[psutil.Process]:
    """What ``find()`` still returns after up to ``timeout`` seconds (polled, nothing
    killed): processes that are on their way out get the time to finish."""
    deadline, pause = time.monotonic() + timeout, 0.02
    found = find()
    while found and time.monotonic() < deadline:
        time.sleep(pause)  # growing: each look reads every process of the machine
        pause = min(pause * 1.5, 0.3)
        found = find()
    return found


def describe(procs) -> list:
    described = []
    for proc in procs:
        try:
            described.append((proc.pid, proc.cmdline()))
        except psutil.Error:
            described.append((proc.pid, "?"))
    return described


def wait_gone(home, timeout: float = EXIT_WAIT) -> None:
    left = settle(lambda: leftovers(home), timeout)
    assert not left, f"left behind: {describe(left)}"


def _parse(line: str):
    try:
        return json.loads(line)
    except ValueError:
        return line


def python(script: str, *args) -> list[str]:
    return [sys.executable, str(BIN / script), *map(str, args)]


def assert_gone(pids, timeout: float = EXIT_WAIT) -> None:
    """Every pid has exited (zombies reaped by their parent count as gone)."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    assert not alive, f"processes still alive: {alive}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
