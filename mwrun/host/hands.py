"""One set of hands on every host: start, pin, drain, watch, signal, reap.

``Hands`` runs in the head's process for the head's own machine and inside ``mwrun
agent`` on every other host: the same code starts a process from its ``LaunchSpec``
(warm from this host's zygote where it may, else the ordinary way), streams its output
as lines, sees its exit the moment it happens (a pidfd in the owner's selector), kills
what its process group leaves behind, reaps the orphans of forked children, and keeps
this host's watchdog told of every group. It decides nothing: what happens is told to
its ``owner`` (the head's loop, which hands it to the supervisor; or the agent, which
sends it over the link) through the ``Owner`` protocol.

A warm start is asked of its zygote and made once the zygote answers (after its
imports, if they are still under way; in order, none overtaking another); the owner's
loop keeps serving meanwhile (an import may outlast the link's silence limit, and a
burst of hundreds of forks once held the loop for seconds). ``start`` then returns
None and the pid comes later with ``owner.spawned``, or ``owner.failed``.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Protocol

from mwrun.errors import StartError
from mwrun.host.lines import LineBuffer
from mwrun.host.process import ProcessHandle
from mwrun.host.warm import Zygote, reap_orphans
from mwrun.host.warmstarts import Waiting, WarmStarts
from mwrun.launchspec import LaunchSpec

READ_SLICE = 65536  # bytes read of one child's output per wake: fair to the others
EXIT_DRAIN = 256 * 1024  # what is read of a child's pipe before its exit is reported
REAP_EVERY = 1.0  # seconds between looks for orphans of forked children


class Owner(Protocol):
    """What the hands tell: the head's loop, or an agent (which tells the head)."""

    def spawned(self, name: str, pid: int, warm: bool) -> None: ...
    def failed(self, name: str, error: str) -> None: ...
    def lines(self, name: str, lines: list[str]) -> None: ...
    def exited(self, name: str, code: int) -> None: ...
    def say(self, text: str) -> None: ...


class Child:
    """One process these hands started: its handle and its output, line by line."""

    def __init__(self, name: str, handle: ProcessHandle, warm: bool):
        self.name, self.handle, self.warm = name, handle, warm
        self.lines = LineBuffer()
        self.reading = True  # its pipe is open (grandchildren may hold it past the exit)
        self.paused = False  # its pipe is left unread for now (back-pressure)
        self.ended = False  # its exit was told (its pid may belong to another by now)


class Watchdog:
    """This host's orphan guard (the ``mwrun.host.watchdog`` process): told of every
    process group started here (``+PGID``, ``-PGID`` once it is gone), it SIGKILLs those
    left should this process die without ending it (``close``)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.popen = subprocess.Popen([sys.executable, "-m", "mwrun.host.watchdog"],
                                      stdin=subprocess.PIPE, text=True, start_new_session=True)
        if self.popen.stdin is None:  # cannot be with stdin=PIPE; for the types
            raise StartError("the watchdog could not be started")
        self.stdin: IO[str] = self.popen.stdin
        self.pid = self.popen.pid

    def tell(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stdin.write(line + "\n")
            self.stdin.flush()

    def close(self, deadline: float) -> None:
        """End it: ``exit`` tells it nothing is left to guard; it has until ``deadline``
        (half a second at least) to go, then it is killed."""
        self.tell("exit")
        with contextlib.suppress(OSError):
            self.stdin.close()
        try:
            self.popen.wait(timeout=max(deadline - self.clock(), 0.5))
        except subprocess.TimeoutExpired:
            self.popen.kill()


class Outputs:
    """The children's output: each pipe read in slices (what is there, never waiting),
    split into lines for the owner, left unread while the owner's link is behind
    (``pause``), and read to its end as the hands close."""

    def __init__(self, selector: selectors.BaseSelector,
                 lines: Callable[[str, list[str]], None], clock: Callable[[], float]):
        self.selector, self.lines, self.clock = selector, lines, clock
        self.pipes: dict[int, Child] = {}  # by output fd: every pipe still open

    def add(self, child: Child) -> None:
        self.pipes[child.handle.output_fd] = child
        self.selector.register(child.handle.output_fd, selectors.EVENT_READ,
                               (self.drain, child))

    def drain(self, child: Child, limit: int = READ_SLICE) -> None:
        """Read up to ``limit`` bytes of a child's output (what is there; never waits)."""
        fd = child.handle.output_fd
        if self.pipes.get(fd) is not child:
            return
        while limit > 0:
            try:
                data = os.read(fd, min(limit, READ_SLICE))
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # EOF: every writer (grandchildren too) has closed it
                self._close_pipe(child)
                return
            limit -= len(data)
            lines = child.lines.feed(data)
            if lines:
                self.lines(child.name, lines)

    def _close_pipe(self, child: Child) -> None:
        lines = child.lines.flush()
        if lines:
            self.lines(child.name, lines)
        if not child.paused:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(child.handle.output_fd)
        del self.pipes[child.handle.output_fd]
        child.reading = False
        child.handle.close_output()

    def pause(self, paused: bool) -> None:
        """Back-pressure: while the owner's link is behind, leave output in the
        children's pipes (they block writing) rather than queue it without bound."""
        for child in self.pipes.values():
            if child.paused == paused:
                continue
            child.paused = paused
            with contextlib.suppress(KeyError, ValueError):
                if paused:
                    self.selector.unregister(child.handle.output_fd)
                else:
                    self.selector.register(child.handle.output_fd, selectors.EVENT_READ,
                                           (self.drain, child))

    def drain_to_end(self, deadline: float) -> None:
        """Read every pipe to its end, until ``deadline`` (a process that left its
        group may hold one for ever); then close what is left."""
        with selectors.DefaultSelector() as pipes:
            for fd in self.pipes:
                pipes.register(fd, selectors.EVENT_READ)
            while self.pipes and self.clock() < deadline:
                for key, _ in pipes.select(max(deadline - self.clock(), 0.0)):
                    child = self.pipes.get(key.fd)
                    if child is not None:
                        self.drain(child, EXIT_DRAIN)
                    if key.fd not in self.pipes:  # its end: closed by drain
                        pipes.unregister(key.fd)
        for child in list(self.pipes.values()):
            self._close_pipe(child)


class Hands:
    def __init__(self, selector: selectors.BaseSelector, owner: Owner, zygote_log,
                 stopping: Callable[[], bool], clock: Callable[[], float] = time.monotonic,
                 zygotes: Sequence[Zygote] = ()):
        self.selector, self.owner, self.stopping, self.clock = selector, owner, stopping, clock
        self.children: dict[str, Child] = {}  # by name: the live one, or its last
        self.outputs = Outputs(selector, owner.lines, clock)
        # What the loop reads when a pipe is ready, and back-pressure from the link.
        self.drain, self.pause_output = self.outputs.drain, self.outputs.pause
        self.reap_due = 0.0
        self.watchdog = Watchdog(clock)
        self.warm = WarmStarts(zygote_log, selector, owner.say, self.watchdog.tell, stopping,
                               started=zygotes)  # any started before these hands

    # -- starting ----------------------------------------------------------------------

    def prepare(self, spec: LaunchSpec) -> None:
        """Start the zygote this process will be forked from, now (imports run side by
        side while the rest of the job is being asked for)."""
        self.warm.prepare(spec.preload, spec.environ(os.environ))

    def start(self, spec: LaunchSpec) -> int | None:
        """Its pid; or None when it is forked warm (``owner.spawned`` or
        ``owner.failed`` tells later). Raises StartError when it cannot start."""
        env = spec.environ(os.environ)
        cpus = set(spec.cpus) if spec.cpus is not None else None
        if self.warm.start(spec.argv, spec.preload, spec.warm, env, spec.cwd, cpus,
                           lambda handle: self._resume(spec, env, handle)):
            return None
        return self._start(spec, env, None).handle.pid

    def fork(self, argv: list[str], modules: tuple[str, ...], how: tuple, env: dict,
             stdio: tuple[int, int], forked: Callable[[int | None], None]) -> bool:
        """A helper of the owner's own, not a job's process (the head's stores' keeper):
        forked warm from a zygote of ``modules`` with ``stdio`` as its stdin and output,
        ``forked`` told its pid (None: start it yourself). False: no zygote can."""
        start = Waiting.helper(argv, modules, how, env, stdio, forked)
        if self.warm.take(start):
            return True
        start.release()
        return False

    def _resume(self, spec: LaunchSpec, env: dict, handle: ProcessHandle | None) -> None:
        """A start made when its turn came: forked warm (``handle``), or to start cold."""
        try:
            if handle is None and self.stopping():
                raise StartError("not started: the job is stopping")
            child = self._start(spec, env, handle)
        except StartError as exc:
            self.owner.failed(spec.name, str(exc))
            return
        self.owner.spawned(spec.name, child.handle.pid, child.warm)
        if self.stopping():  # forked as the stop began: it was asked for before
            child.handle.signal(signal.SIGTERM)

    def _start(self, spec: LaunchSpec, env: dict, handle: ProcessHandle | None) -> Child:
        warm = handle is not None
        if handle is None:
            cpus = set(spec.cpus) if spec.cpus is not None else None
            handle = ProcessHandle.spawn(spec.argv, env, spec.cwd, cpus, spec.netns)
        self.watchdog.tell(f"+{handle.pid}")
        child = Child(spec.name, handle, warm)
        self.children[spec.name] = child
        self.selector.register(handle.exit_fd, selectors.EVENT_READ, (self._exited, child))
        self.outputs.add(child)
        return child

    # -- what is asked of a started one -------------------------------------------------

    def signal(self, name: str, sig: int) -> None:
        child = self.children.get(name)
        if child is not None and not child.ended:
            child.handle.signal(sig)

    def status(self, name: str) -> str | None:
        """Its state in /proc ('running', 'stopped', ...), None if gone or unknown."""
        child = self.children.get(name)
        return child.handle.status() if child is not None and not child.ended else None

    def usage(self, name: str) -> tuple[float | None, int | None]:
        child = self.children.get(name)
        return child.handle.usage() if child is not None else (None, None)

    def pid(self, name: str) -> int | None:
        child = self.children.get(name)
        return child.handle.pid if child is not None else None

    def was_warm(self, name: str) -> bool | None:
        child = self.children.get(name)
        return child.warm if child is not None else None

    # -- output and exits ----------------------------------------------------------------

    def _exited(self, child: Child) -> None:
        code = child.handle.returncode()
        if code is None:
            return  # the fallback notifier can run a moment ahead of the reaping
        # Its group may outlive it (a grandchild that ignores SIGTERM, a daemon it
        # forked): nothing of a process outlives the process itself.
        child.handle.signal(signal.SIGKILL)
        self.drain(child, EXIT_DRAIN)  # its last words, before its exit is told
        self.selector.unregister(child.handle.exit_fd)
        child.handle.close_exit()
        child.ended = True
        self.watchdog.tell(f"-{child.handle.pid}")
        self.owner.exited(child.name, code)

    def tick(self) -> None:
        """Give up on forks a zygote leaves unanswered; reap the orphans of forked
        children (they are ours: a subreaper's)."""
        self.warm.tick()
        now = self.clock()
        if now < self.reap_due:
            return
        if self.warm.in_flight():
            # A child forked and not yet told (its zygote's answer unread) is ours but
            # not known yet: a quick script may have ended already, and reaped as an
            # orphan its exit would be lost. Orphans wait for a turn with none asked.
            return
        self.reap_due = now + REAP_EVERY
        known = {c.handle.pid for c in self.children.values()} | self.warm.pids()
        reap_orphans(known | {self.watchdog.pid})

    def live(self) -> dict[str, Child]:
        """The children whose exit has not been told yet."""
        return {n: c for n, c in self.children.items() if not c.ended}

    # -- the end ------------------------------------------------------------------------

    def close(self, deadline: float) -> dict[str, int]:
        """Leave nothing behind and never wait past ``deadline``: SIGKILL every group,
        wait for the exits, drain the pipes to their end (a process that left its group
        may hold one for ever), stop the zygotes and the watchdog. Returns the exit
        codes seen here of children whose exit was not told yet."""
        live = self.live()
        for child in live.values():
            child.handle.signal(signal.SIGKILL)
        codes = {}
        for name, child in live.items():
            code = child.handle.wait(max(deadline - self.clock(), 0.0))
            if code is not None:
                codes[name] = code
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(child.handle.exit_fd)
                child.handle.close_exit()
                child.ended = True
        self.outputs.drain_to_end(deadline)
        self.warm.close(deadline)
        self.watchdog.close(deadline)
        return codes
