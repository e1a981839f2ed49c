"""One live child process: spawned in its own session, watched through a pidfd.

The handle only does: start, signal its process group, report its exit and usage.
Deciding what to do about any of it is the supervisor's job.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from typing import IO, Protocol

import psutil

from mwrun.errors import StartError


class Child(Protocol):
    """What a handle needs of its process: a ``subprocess.Popen`` started with
    ``stdout=PIPE`` (``spawn``), or a ``warm.ForkedChild`` (forked, never exec'd)."""

    @property
    def pid(self) -> int: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class ProcessHandle:
    def __init__(self, popen: Child):
        # Never None: spawn's Popen has stdout=PIPE, a ForkedChild always has its pipe.
        assert popen.stdout is not None, "a child's output is always a pipe"
        self.popen = popen
        self.pid = popen.pid
        self.output: IO[bytes] = popen.stdout
        self.output_fd = self.output.fileno()
        os.set_blocking(self.output_fd, False)
        self._ps: psutil.Process | None = None
        self.exit_fd, self._exit_writer = _exit_notifier(popen)

    @classmethod
    def spawn(cls, cmd, env: dict, cwd: str, cpus=None, netns: str | None = None):
        """Start ``cmd`` (never through a shell) in a new session; raises StartError."""
        argv = list(cmd)
        if netns:
            argv = ["ip", "netns", "exec", netns, *argv]
        # A child inherits the CPU mask of the thread that forks it: pin this thread
        # for the moment of the fork, so the child is pinned before it runs a line.
        saved = os.sched_getaffinity(0) if cpus is not None else None
        try:
            if cpus is not None:
                os.sched_setaffinity(0, cpus)
            popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, close_fds=True)
        except OSError as exc:
            raise StartError(f"{exc.strerror or exc}: {argv[0]!r}"
                             + (f" (cwd {cwd})" if isinstance(exc, NotADirectoryError) else "")
                             ) from None
        finally:
            if saved is not None:
                os.sched_setaffinity(0, saved)
        return cls(popen)

    def signal(self, sig: int) -> None:
        """Signal the whole process group (the child is its leader); gone is fine."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def returncode(self) -> int | None:
        """The exit status once the child has exited (reaping it), else None."""
        return self.popen.poll()

    def wait(self, timeout: float) -> int | None:
        """The exit status, waiting at most ``timeout`` seconds for it; None if it
        still runs (a process stuck in the kernel ignores even SIGKILL)."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close_exit(self) -> None:
        """Release the exit notifier (after the exit was handled)."""
        with contextlib.suppress(OSError):
            os.close(self.exit_fd)
        if self._exit_writer is not None:
            with contextlib.suppress(OSError):
                os.close(self._exit_writer)

    def close_output(self) -> None:
        """Release the output pipe (after its end of file, or at the very end)."""
        self.output.close()

    def status(self) -> str | None:
        """psutil's status ('running', 'sleeping', 'stopped', ...), None if gone."""
        try:
            return self._proc().status()
        except psutil.Error:
            return None

    def usage(self) -> tuple[float | None, int | None]:
        """(cpu percent since the last call, resident bytes) of the process itself.

        Not of its children: finding them means reading every process on the machine,
        which cost the supervisor most of its time when watching many processes.
        """
        try:
            proc = self._proc()
            return proc.cpu_percent(None), proc.memory_info().rss
        except psutil.Error:
            return None, None

    def _proc(self) -> psutil.Process:
        if self._ps is None:
            self._ps = psutil.Process(self.pid)
        return self._ps


def _exit_notifier(popen: Child) -> tuple[int, int | None]:
    """A descriptor that becomes readable when the child exits: its pidfd where the
    kernel has them, else a pipe written by a thread blocked in waitid (no polling)."""
    try:
        return os.pidfd_open(popen.pid), None
    except (AttributeError, OSError):
        pass
    read, write = os.pipe()

    def wait() -> None:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOWAIT)
        with contextlib.suppress(OSError):
            os.write(write, b"x")

    threading.Thread(target=wait, name=f"mwrun-wait-{popen.pid}", daemon=True).start()
    return read, write
