"""Warm-start hands for a loop (the head's, or an agent's on its host): its zygotes,
watched in its selector, known to its watchdog, and what it tells the user while they
come up (warm.py does the rest). Which command can start warm is the plan's to say
(``plan.preload.target``); this only forks.

A fork is asked and answered through the loop's selector, never waited for: a child
takes a while to become its process (on a loaded machine, tens of milliseconds each),
so a bring-up of hundreds of processes waited for in turn held the loop for seconds:
``status`` went unanswered and Ctrl-C took that long. Each zygote is asked at most
WINDOW forks ahead of its answers (it forks the next while those before set up, and
answers in order); the rest wait their turn, in order (none overtakes another).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mwrun.host import warm
from mwrun.host import zygote as protocol
from mwrun.host.process import ProcessHandle

WINDOW = 16  # forks asked of one zygote at once: two middles of BATCH (zygote.py) in flight
CLOSE_WAIT = 2.0  # seconds, at the end, for forks already asked (their children die)


@dataclass
class Waiting:
    """A start waiting for its turn, or for its zygote's answer. ``resume`` gets the
    warm child's handle, or None: start it the ordinary way (or not at all, if the job
    is stopping)."""

    argv: list[str]
    modules: tuple[str, ...]
    how: tuple | None
    env: dict
    cwd: str
    cpus: set[int] | None
    resume: Callable[[ProcessHandle | None], None]
    output: int = -1  # the read end of the child's output pipe, once asked
    asked_at: float = 0.0
    # A helper of the owner's (``helper``): its own stdin and output (ours to close), and
    # what is told its pid, or None to start it cold; its output is not read here.
    stdio: tuple[int, int] | None = None
    forked: Callable[[int | None], None] | None = None

    @classmethod
    def helper(cls, argv: list[str], modules: tuple[str, ...], how: tuple, env: dict,
               stdio: tuple[int, int], forked: Callable[[int | None], None]) -> Waiting:
        """A helper of the owner's own, not a job's process (the head's stores' keeper),
        with ``stdio`` (copied here) as its stdin and its output."""
        return cls(list(argv), tuple(modules), how, env, "/", None, lambda handle: None,
                   stdio=(os.dup(stdio[0]), os.dup(stdio[1])), forked=forked)

    def release(self) -> None:
        """The helper's copies of its stdin and output, closed (sent, or not wanted)."""
        if self.stdio is not None:
            for fd in self.stdio:
                os.close(fd)
            self.stdio = None

    def cold(self) -> None:
        """Its turn came and it starts the ordinary way (or not at all)."""
        self.release()
        if self.forked is not None:
            self.forked(None)
        else:
            self.resume(None)


class WarmStarts:
    def __init__(self, log_path, selector, say, tell_watchdog, stopping,
                 clock: Callable[[], float] = time.monotonic,
                 started: Sequence[warm.Zygote] = ()):
        self.selector, self.say, self.clock = selector, say, clock
        self.tell_watchdog, self.stopping = tell_watchdog, stopping
        self.waiting: deque[Waiting] = deque()  # not asked yet, in order
        self.asked: dict[warm.Zygote, deque[Waiting]] = {}  # by zygote, in its order
        self.warned: set[tuple] = set()
        # Forked children become the supervisor's own to wait for (warm.py says why);
        # where that cannot be, every process starts cold.
        self.can_fork = warm.become_subreaper()
        self.zygotes = warm.Zygotes(sys.executable, log_path, say, self._started, self._closed,
                                   started)
        for zygote in started:  # its owner said so when it started them
            self._watch(zygote)

    def prepare(self, modules, env: dict) -> None:
        """Start the zygote a process will need now, so imports run side by side."""
        if modules and self.can_fork:
            self.zygotes.prepare(tuple(modules), env)

    def start(self, argv, modules, how, env: dict, cwd: str, cpus,
              resume: Callable[[ProcessHandle | None], None]) -> bool:
        """Whether the start is taken: ``resume`` is then called later (from the loop,
        once its zygote answered, or at once with None when its turn comes and it
        starts cold). False: start it the ordinary way now. ``how``: the plan's
        ("script", path, args) or ("module", name, args) for ``argv``, else None."""
        return self.take(Waiting(list(argv), tuple(modules or ()), how, env, cwd, cpus,
                                 resume))

    def take(self, start: Waiting) -> bool:
        """A start (a job's process, or a helper's: ``Waiting.helper``) queued behind
        the others, if it may be forked warm; False: start it the ordinary way now."""
        if not self.waiting and not self._warm(start.modules, start.how, start.cwd):
            return False
        self.waiting.append(start)
        self._ask()
        return True

    def _warm(self, modules, how, cwd: str) -> bool:
        return bool(modules and how and self.can_fork and warm.eligible(how[0], how[1], cwd))

    def _ask(self) -> None:
        """Ask for every start whose turn has come, as far as the zygotes can take."""
        while self.waiting:
            start = self.waiting[0]
            if self.stopping() or not self._warm(start.modules, start.how, start.cwd):
                self.waiting.popleft().cold()
                continue
            zygote = self.zygotes.prepare(start.modules, start.env)
            if zygote.alive and zygote.ready_after is None:
                return  # still importing: it says when it is ready
            if not zygote.alive:
                self._cold(zygote, f"the zygote failed: {zygote.failed or 'it ended'}")
                self.waiting.popleft().cold()
                continue
            if len(self.asked.get(zygote, ())) >= WINDOW:
                return  # its answers make room
            self.waiting.popleft()
            self._send(zygote, start)

    def _send(self, zygote: warm.Zygote, start: Waiting) -> None:
        kind, target, args = start.how or ("", "", ())
        if start.stdio is not None:  # a helper's: its output is its owner's business
            (stdin, write), read, start.stdio = start.stdio, -1, None
        else:
            read, write = os.pipe()
            stdin = os.open(os.devnull, os.O_RDONLY)
        try:
            # A blocking send: the zygote holds at most WINDOW requests, far below what
            # its socket buffers, so this never waits on it.
            zygote.sock.settimeout(warm.REPLY_TIMEOUT)
            protocol.send(zygote.sock, warm.fork_request(
                start.argv, kind, target, args, start.env, start.cwd, start.cpus,
                helper=start.forked is not None), (stdin, write))
        except OSError as exc:
            _close(read)
            zygote.failed = zygote.failed or f"its socket failed ({exc})"
            self._cold(zygote, f"the zygote failed: {zygote.failed}")
            start.cold()
            return
        finally:
            os.close(write)
            os.close(stdin)
        start.output, start.asked_at = read, self.clock()
        self.asked.setdefault(zygote, deque()).append(start)

    def _answered(self, zygote: warm.Zygote, reply: dict) -> None:
        start = self.asked[zygote].popleft()
        if "pid" in reply and start.forked is not None:
            start.forked(reply["pid"])
            return
        if "pid" in reply:
            start.resume(ProcessHandle(warm.ForkedChild(reply["pid"], start.output)))
            return
        _close(start.output)
        self._cold(zygote, reply.get("cold") or reply.get("error") or "no reason given")
        start.cold()

    def _unanswered(self, zygote: warm.Zygote) -> None:
        """A zygote that ended or went silent: what it was asked starts cold."""
        for start in self.asked.pop(zygote, ()):
            _close(start.output)
            self._cold(zygote, f"the zygote failed: {zygote.failed or 'it ended'}")
            start.cold()

    def _cold(self, zygote: warm.Zygote, reason: str) -> None:
        key = (zygote.pid, reason)
        if key not in self.warned:
            self.warned.add(key)
            self.say(f"warm start not possible ({reason}); starting processes the ordinary"
                     " way")

    def tick(self) -> None:
        """A zygote that does not get ready or answer a fork in time has failed; a stop
        cancels the starts not asked yet (a zygote still importing may take long)."""
        now = self.clock()
        for zygote in self.zygotes.zygotes:
            zygote.check_ready()
        if self.waiting and any(not z.alive for z in self.zygotes.zygotes):
            self._ask()  # the starts waiting for one that failed go cold
        for zygote, asked in list(self.asked.items()):
            if asked and now - asked[0].asked_at > warm.REPLY_TIMEOUT:
                zygote.failed = zygote.failed or "it did not answer"
                self._unanswered(zygote)
        if self.waiting and self.stopping():
            self._ask()

    def pids(self) -> set[int]:
        return self.zygotes.pids()

    def in_flight(self) -> bool:
        """Whether a fork has been asked and its answer (the child's pid) not read."""
        return any(self.asked.values())

    def close(self, deadline: float) -> None:
        """The forks asked and not yet answered (only after the loop failed): their
        children, once known, are killed, never left running."""
        for zygote, asked in list(self.asked.items()):
            while asked and zygote.alive:
                reply = zygote.receive(deadline - self.clock())
                if reply is None:
                    break
                if "pid" in reply:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(reply["pid"], signal.SIGKILL)
                _close(asked.popleft().output)
            for start in asked:
                _close(start.output)
        self.asked.clear()
        self.zygotes.close()

    def _started(self, zygote) -> None:
        self.say(warm.started_line(zygote))
        self._watch(zygote)

    def _watch(self, zygote) -> None:
        self.tell_watchdog(f"+{zygote.pid}")
        self.selector.register(zygote.sock, selectors.EVENT_READ, (self._said, zygote))

    def _closed(self, zygote) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(zygote.sock)
        self.tell_watchdog(f"-{zygote.pid}")
        self._unanswered(zygote)

    def _said(self, zygote) -> None:
        """An answer to a fork, or a message nobody asked for: ready, failed, the end."""
        message = zygote.receive(0.0)
        if message is not None and self.asked.get(zygote) and \
                any(key in message for key in ("pid", "cold", "error")):
            self._answered(zygote, message)
            self._ask()
            return
        if message is not None and "pid" in message:
            # The answer to a fork given up on (it came too late): nobody waits for
            # that child, so it must not run.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(message["pid"], signal.SIGKILL)
            return
        was_importing = zygote.ready_after is None and zygote.failed is None
        zygote.take(message)
        if was_importing and zygote.ready_after is not None and self.waiting:
            self.say(f"zygote ready: {', '.join(zygote.modules)} imported in"
                     f" {zygote.ready_after:.1f}s; forking warm processes from it")
        if not zygote.alive:
            self._unanswered(zygote)
            if zygote.ready_after is not None and not self.stopping():
                self.say(f"the zygote (pid {zygote.pid}) ended ({zygote.failed});"
                         " processes forked from it are unaffected; starting a new one")
                self.zygotes.revive(zygote)
            else:
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(zygote.sock)  # failed: its processes start cold
        self._ask()


def _close(fd: int) -> None:
    """A child's output pipe, if it has one here (a helper's output is not read)."""
    if fd >= 0:
        os.close(fd)
