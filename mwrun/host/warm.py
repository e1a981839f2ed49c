"""Warm starts, seen from the supervisor: zygotes, and the children forked from them.

``Zygotes`` keeps one zygote (zygote.py) per preload list and shared environment: the
environment a child is started with, without the variables mwrun sets per process
(which nothing reads at import), is the zygote's own, so the preloaded modules were
imported under exactly the environment a fresh process would have imported them under.

Exit statuses stay exact: the supervisor makes itself a child subreaper, the zygote
double-forks, and every forked child becomes the supervisor's own child, waited for
with ``waitpid`` and watched with a pidfd like any other, whether or not its zygote
still lives. Orphans of the job's processes now come to the supervisor as well;
``reap_orphans`` collects them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time

from mwrun.errors import StartError
from mwrun.host import zygote as protocol
from mwrun.host.process import ProcessHandle

BOOT = "from mwrun.host.zygote import main; main()"
READY_TIMEOUT = 120.0  # seconds for the preload imports (a cold CUDA machine is slow)
REPLY_TIMEOUT = 30.0  # seconds for one fork
TITLE_ROOM = 4096  # bytes of argv the children's command lines can take
ENV_ROOM = 32768  # bytes of environment block the children's environments can take
PR_SET_CHILD_SUBREAPER = 36
# Set by mwrun for each process, read by nothing at import: not part of a zygote's key.
PER_PROCESS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
               "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
               "ROLE_WORLD_SIZE", "ROLE_NAME", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
PER_PROCESS_PREFIXES = ("MWRUN_", "TORCHELASTIC_")


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(known: set[int]) -> None:
    """Reap exited children that are none of ours (orphans of the job's processes),
    never touching a known one: its exit is read by its own handle."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid in known:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, 0)


def shared_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k not in PER_PROCESS and not k.startswith(PER_PROCESS_PREFIXES)}


class ForkedChild:
    """The little of subprocess.Popen the supervisor uses, for a child it did not exec."""

    def __init__(self, pid: int, stdout_fd: int):
        self.pid = pid
        self.stdout = os.fdopen(stdout_fd, "rb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._wait(os.WNOHANG)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        while (code := self.poll()) is None:
            if timeout is None:
                self._wait(0)
            else:
                time.sleep(0.01)  # the rare bounded wait: at the very end of a run
                timeout -= 0.01
                if timeout <= 0:
                    raise subprocess.TimeoutExpired([str(self.pid)], timeout)
        return code

    def _wait(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:
            self.returncode = 255  # not ours to wait for: cannot happen as a subreaper
            return
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)


class Zygote:
    def __init__(self, python: str, modules: tuple[str, ...], env: dict[str, str], log):
        self.modules, self.env = modules, env
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.started = time.monotonic()
        self.ready_after: float | None = None
        self.failed: str | None = None
        with theirs:
            self.popen = subprocess.Popen(
                [python, "-c", BOOT, str(theirs.fileno()), ",".join(modules), " " * TITLE_ROOM],
                env={**env, protocol.PAD_VAR: "x" * ENV_ROOM}, pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd="/")
        self.pid = self.popen.pid

    @property
    def alive(self) -> bool:
        return self.failed is None and self.popen.poll() is None

    def wait_ready(self) -> bool:
        """Block until the imports are done; False (and ``failed`` says why) if not."""
        while self.ready_after is None and self.failed is None:
            message = self._receive(READY_TIMEOUT - (time.monotonic() - self.started))
            self.take(message)
        return self.failed is None

    def take(self, message: dict | None) -> None:
        """A message that arrived unasked: ready, an import that failed, end of file."""
        if message is None:
            self.failed = self.failed or "it ended"
        elif "ready" in message:
            self.ready_after = time.monotonic() - self.started
        elif "failed" in message:
            self.failed = message["failed"]

    def fork(self, request: dict, stdin: int, output: int) -> int:
        """The new child's pid; StartError(reason) if it must start cold instead."""
        if not self.wait_ready():
            raise StartError(f"the zygote failed: {self.failed}")
        try:
            protocol.send(self.sock, request, (stdin, output))
            reply = self._receive(REPLY_TIMEOUT)
        except OSError as exc:
            reply = None
            self.failed = f"its socket failed ({exc})"
        if reply is None:
            self.failed = self.failed or "it did not answer"
            raise StartError(f"the zygote failed: {self.failed}")
        if "pid" in reply:
            return reply["pid"]
        raise StartError(reply.get("cold") or reply.get("error") or "no reason given")

    def _receive(self, timeout: float) -> dict | None:
        self.sock.settimeout(max(timeout, 0.001))
        try:
            return protocol.receive(self.sock)[0]
        except (TimeoutError, OSError):
            return None

    def close(self) -> None:
        """End it (closing the socket ends it; a signal makes sure) and reap it."""
        self.sock.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait()


class Zygotes:
    """Every zygote of one supervisor, started on first need and replaced when one dies."""

    def __init__(self, python: str, log_path, say, on_start=None, on_close=None):
        self.python = python
        self.log_path = log_path
        self.say = say
        self.on_start = on_start or (lambda zygote: None)
        self.on_close = on_close or (lambda zygote: None)
        self.by_key: dict[tuple, Zygote] = {}
        self.warned: set[tuple] = set()

    def prepare(self, modules: tuple[str, ...], env: dict[str, str]) -> Zygote:
        """The zygote for these modules and this (full) environment, started if need be."""
        shared = shared_env(env)
        key = (modules, tuple(sorted(shared.items())))
        zygote = self.by_key.get(key)
        if zygote is not None and not zygote.alive and zygote.ready_after is not None:
            self.say(f"the zygote (pid {zygote.pid}) is gone ({zygote.failed or 'it ended'});"
                     " starting a new one")
            self._retire(zygote)
            zygote = None
        # One that never got ready (a module that does not import) stays as it is: its
        # processes start cold, and it is not started again and again.
        if zygote is None:
            with open(self.log_path, "ab") as log:
                zygote = Zygote(self.python, modules, shared, log)
            self.by_key[key] = zygote
            self.on_start(zygote)
        return zygote

    def spawn(self, argv, kind: str, target: str, args, env: dict, cwd: str, cpus,
              modules: tuple[str, ...]) -> ProcessHandle | None:
        """A handle on a child forked warm, or None where it must start cold (said once)."""
        zygote = self.prepare(modules, env)
        read, write = os.pipe()
        stdin = os.open(os.devnull, os.O_RDONLY)
        request = fork_request(argv, kind, target, args, env, cwd, cpus)
        try:
            pid = zygote.fork(request, stdin, write)
        except StartError as exc:
            os.close(read)
            key = (zygote.pid, str(exc))
            if key not in self.warned:
                self.warned.add(key)
                self.say(f"warm start not possible ({exc}); starting processes the ordinary"
                         " way")
            return None
        finally:
            os.close(write)
            os.close(stdin)
        return ProcessHandle(ForkedChild(pid, read))

    def revive(self, zygote: Zygote) -> Zygote | None:
        """After a ready zygote died: its successor, started at once (None if it was
        retired, or never got ready: then the next start tries again)."""
        key = next((k for k, z in self.by_key.items() if z is zygote), None)
        if key is None or zygote.ready_after is None:
            return None
        self._retire(zygote)
        del self.by_key[key]
        return self.prepare(zygote.modules, zygote.env)

    def _retire(self, zygote: Zygote) -> None:
        self.on_close(zygote)
        zygote.close()

    def pids(self) -> set[int]:
        return {z.pid for z in self.by_key.values()}

    def close(self) -> None:
        for zygote in self.by_key.values():
            self._retire(zygote)
        self.by_key.clear()


def fork_request(argv, kind: str, target: str, args, env: dict, cwd: str, cpus) -> dict:
    """What a zygote is asked to fork: the process, and this thread's signal state."""
    return {
        "argv": list(argv), "kind": kind, "target": target, "args": list(args),
        "env": env, "cwd": cwd, "cpus": sorted(cpus if cpus is not None
                                               else os.sched_getaffinity(0)),
        "ignored": [int(s) for s in signal.valid_signals() if _ignored(s)],
        "mask": [int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])]}


def _ignored(sig) -> bool:
    if sig in (signal.SIGKILL, signal.SIGSTOP):
        return False
    with contextlib.suppress(OSError, ValueError):
        return signal.getsignal(sig) == signal.SIG_IGN
    return False


def eligible(kind: str, target: str, cwd: str) -> bool:
    """A script runs warm only when it is a plain file (a folder or a zip with
    __main__.py, or a missing file, takes the interpreter's own path and errors)."""
    if kind == "module":
        return True
    path = os.path.join(cwd, target)
    return os.path.isfile(path) and not _is_zip(path)


def _is_zip(path: str) -> bool:
    with contextlib.suppress(OSError), open(path, "rb") as handle:
        return handle.read(4) == b"PK\x03\x04"
    return False

