"""Warm starts, seen from the supervisor: zygotes, and the children forked from them.

``Zygotes`` keeps the zygotes (zygote.py) of one supervisor, each with its preload
list and the environment it imported them under. A child gets its own environment
after the fork (replaced, not merged), so what must match is only what the imports
could see: a zygote serves a process when their preload lists are the same and their
environments agree on every variable that can change what an import does
(``serves``). That is not every variable: one zygote per distinct ``env:`` would make
a job whose processes each set their own ``env:`` as slow as a cold start and heavier.
Which ones can:

* those the imports read through ``os.environ``, which the zygote records and tells
  when it is ready (all of them if the imports looked at every one); until then a
  process waits for it to say, and then is forked from it or gets a zygote of its own;
* those the interpreter, the C library and the preloaded libraries' native code read
  as they start or load, outside ``os.environ``'s sight (``IMPORT_PREFIXES`` and
  ``IMPORT_NAMES``: ``PYTHONPATH``, ``LD_*``, the locale, OpenMP and torch's own ...),
  which always count, so two processes that differ there never share one.

What mwrun sets per process (``PER_PROCESS``: ranks, ``MWRUN_*``) is never part of it:
a preloaded module that reads it at import sees it unset (docs/topology.rst, Warm starts;
``validate`` warns).

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
from collections.abc import Sequence

from mwrun.host import zygote as protocol

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
# Read at start or load, outside os.environ: by the interpreter (PYTHON*, HOME for the
# user site, the locale for stdio's encoding), the loader and C library, and the native
# code of what is preloaded (OpenMP, BLAS, torch, CUDA).
IMPORT_PREFIXES = ("PYTHON", "LD_", "LC_", "MALLOC_", "OMP_", "KMP_", "GOMP_", "MKL_",
                   "OPENBLAS_", "TORCH", "PYTORCH_", "CUDA_", "NVIDIA_")
IMPORT_NAMES = ("HOME", "LANG", "LANGUAGE", "TZ", "GLIBC_TUNABLES")


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


def always_counts(env: dict[str, str]) -> dict[str, str]:
    """The variables that can change an import unseen (see the module's docstring)."""
    return {k: v for k, v in env.items() if k in IMPORT_NAMES or k.startswith(IMPORT_PREFIXES)}


def serves(zygote_env: dict[str, str], read: list[str] | None, read_all: bool,
           env: dict[str, str]) -> bool | None:
    """Whether a zygote that imported under ``zygote_env`` (both shared, per-process
    variables left out) can fork a process of environment ``env``: None while it has not
    said what its imports read (``read``), and it may yet."""
    if always_counts(zygote_env) != always_counts(env):
        return False
    if read_all:
        return zygote_env == env
    if read is None:
        return None
    return all(zygote_env.get(name) == env.get(name) for name in read)


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
        self.read: list[str] | None = None  # the variables its imports read, once ready
        self.read_all = False
        with theirs:
            self.popen = subprocess.Popen(
                [python, "-c", BOOT, str(theirs.fileno()), ",".join(modules), " " * TITLE_ROOM],
                env={**env, protocol.PAD_VAR: "x" * ENV_ROOM}, pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd="/")
        self.pid = self.popen.pid

    @property
    def alive(self) -> bool:
        if self.failed is None and self.popen.poll() is not None:
            # Ended: its last words (an import that failed) are read before anything
            # says merely that it ended; the loop may not have read them yet.
            while self.failed is None:
                self.take(self.receive(0.0))
        return self.failed is None

    def check_ready(self) -> None:
        """One still importing past READY_TIMEOUT has failed: its starts go cold."""
        if self.ready_after is None and self.failed is None and \
                time.monotonic() - self.started > READY_TIMEOUT:
            self.failed = f"its imports did not finish within {READY_TIMEOUT:g}s"

    def take(self, message: dict | None) -> None:
        """A message that arrived unasked: ready, an import that failed, end of file."""
        if message is None:
            self.failed = self.failed or "it ended"
        elif "ready" in message:
            self.ready_after = time.monotonic() - self.started
            self.read, self.read_all = list(message.get("read", [])), bool(message.get("all"))
        elif "failed" in message:
            self.failed = message["failed"]

    def receive(self, timeout: float) -> dict | None:
        """Its next message, or None (nothing within ``timeout``, or its end)."""
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


def started_line(zygote: Zygote) -> str:
    """What the user is told when a zygote starts."""
    return (f"zygote (pid {zygote.pid}) importing {', '.join(zygote.modules)};"
            " python processes will be forked from it")


class Zygotes:
    """Every zygote of one supervisor, started on first need and replaced when one dies."""

    def __init__(self, python: str, log_path, say, on_start=None, on_close=None,
                 started: Sequence[Zygote] = ()):
        """``started``: zygotes started before these hands existed (``launch`` starts
        its own first thing), kept as if started here; ``on_start`` is not called for
        them: their owner watches them as it is made."""
        self.python = python
        self.log_path = log_path
        self.say = say
        self.on_start = on_start or (lambda zygote: None)
        self.on_close = on_close or (lambda zygote: None)
        self.zygotes: list[Zygote] = list(started)  # in the order they were started
        self.warned: set[tuple] = set()

    def prepare(self, modules: tuple[str, ...], env: dict[str, str]) -> Zygote:
        """The zygote for these modules and this (full) environment, started if need be.
        One still importing may be returned for an environment it turns out not to
        serve: asked again once it is ready, this gives the process one of its own."""
        shared = shared_env(env)
        zygote = self._serving(modules, shared)
        if zygote is not None and not zygote.alive and zygote.ready_after is not None:
            self.say(f"the zygote (pid {zygote.pid}) is gone ({zygote.failed or 'it ended'});"
                     " starting a new one")
            self._retire(zygote)
            self.zygotes.remove(zygote)
            zygote = None
        if zygote is None:
            with open(self.log_path, "ab") as log:
                zygote = Zygote(self.python, modules, shared, log)
            self.zygotes.append(zygote)
            self.on_start(zygote)
        return zygote

    def _serving(self, modules: tuple[str, ...], shared: dict[str, str]) -> Zygote | None:
        for zygote in self.zygotes:
            if zygote.modules != modules:
                continue
            if zygote.ready_after is None and zygote.failed is not None:
                # It never got ready (a module that does not import): its processes
                # start cold, and it is not started again and again.
                if always_counts(zygote.env) == always_counts(shared):
                    return zygote
                continue
            if serves(zygote.env, zygote.read, zygote.read_all, shared) is not False:
                return zygote
        return None

    def revive(self, zygote: Zygote) -> Zygote | None:
        """After a ready zygote died: its successor, started at once (None if it was
        retired, or never got ready: then the next start tries again)."""
        if zygote not in self.zygotes or zygote.ready_after is None:
            return None
        self._retire(zygote)
        self.zygotes.remove(zygote)
        return self.prepare(zygote.modules, zygote.env)

    def _retire(self, zygote: Zygote) -> None:
        self.on_close(zygote)
        zygote.close()

    def pids(self) -> set[int]:
        return {z.pid for z in self.zygotes}

    def close(self) -> None:
        for zygote in self.zygotes:
            self._retire(zygote)
        self.zygotes.clear()


def fork_request(argv, kind: str, target: str, args, env: dict, cwd: str, cpus,
                 helper: bool = False) -> dict:
    """What a zygote is asked to fork: the process, and this thread's signal state.
    ``helper``: a helper of the supervisor's own (the stores' keeper), which does not die
    with it (it ends with its own link: a new agent of this host finds it there)."""
    return {
        "argv": list(argv), "kind": kind, "target": target, "args": list(args),
        "env": env, "cwd": cwd, "helper": helper, "cpus": sorted(cpus if cpus is not None
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

