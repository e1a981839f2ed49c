"""What the head asks of this host, done here: each request frame (``host.frames``) an
agent reads is one ``on_KIND`` method of ``Asks``, carried out on the host's hands, its
spies and its relay; the answers go back over the agent's link. The agent keeps the
link itself (frames in and out, beats, silence) and the loop (``host.agent``)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import Protocol

from mwrun.errors import StartError
from mwrun.host import helpers
from mwrun.host.breaks import Breaks
from mwrun.host.door import Door
from mwrun.host.frames import Kind
from mwrun.host.hands import Hands
from mwrun.host.relay import Relay
from mwrun.host.spy import Spies
from mwrun.launchspec import LaunchSpec, SpecError

KEEPER = "mwrun.keeper"  # the module the keeper runs


class Link(Protocol):
    """The agent's link to the head, as the answers go on it."""

    def send(self, kind: str, **fields) -> None: ...
    def starting(self, spec: LaunchSpec) -> None: ...
    def spawned(self, name: str, pid: int, warm: bool) -> None: ...
    def failed(self, name: str, error: str) -> None: ...


class Asks:
    """The head's requests, each done on this host: ``on_KIND(frame)``."""

    def __init__(self, hands: Hands, spies: Spies, relay: Relay, link: Link,
                 wall: Callable[[], float], stop: Callable[[], None],
                 stopping: Callable[[], None], breaks: Breaks, door: Door,
                 noted: Callable[[str], None] = lambda path: None):
        self.hands, self.spies, self.relay, self.link = hands, spies, relay, link
        self.door = door  # where a new head takes over: opened once the secret is told
        self.noted = noted  # where to write that the head is away (absence.py)
        self.breaks = breaks  # what an exit headless breaks: learnt from starts and lines
        self.wall = wall  # this host's wall clock: the times told to the head (frames.py)
        self.stop, self.stopping = stop, stopping
        self.keeper: int | None = None  # a pidfd of the keeper started here, if one was

    def handler(self, kind: object) -> Callable[[dict], None] | None:
        """The method for a frame of ``kind``; None for a kind an agent is not asked."""
        return getattr(self, f"on_{kind}", None)

    def _spec(self, msg: dict) -> LaunchSpec | None:
        try:
            return LaunchSpec.from_fields(msg)
        except SpecError as exc:
            if isinstance(msg.get("name"), str):
                self.link.send(Kind.FAILED, name=msg["name"], error=str(exc))
            return None

    def on_prepare(self, msg: dict) -> None:
        spec = self._spec(msg)
        if spec is not None:
            self.hands.prepare(spec)

    def on_spawn(self, msg: dict) -> None:
        spec = self._spec(msg)
        if spec is None:
            return
        self.breaks.spawned(spec)
        self.link.starting(spec)
        try:
            pid = self.hands.start(spec)
        except StartError as exc:
            self.link.failed(spec.name, str(exc))
            return
        if pid is not None:  # else it waits for its zygote: told when made
            self.link.spawned(spec.name, pid, bool(self.hands.was_warm(spec.name)))

    def on_signal(self, msg: dict) -> None:
        with contextlib.suppress(TypeError, ValueError):
            self.hands.signal(str(msg["name"]), int(msg["signal"]))

    def on_probe(self, msg: dict) -> None:
        name = str(msg.get("name"))
        cpu, rss = self.hands.usage(name)
        self.link.send(Kind.PROBED, name=name, status=self.hands.status(name), cpu=cpu,
                       rss=rss)

    def on_capture(self, msg: dict) -> None:
        """Read a process's stacks from outside, for a bundle (head/postmortem.py)."""
        self.spies.asked(msg)

    def on_stop(self, msg: dict) -> None:
        self.stop()

    def on_secret(self, msg: dict) -> None:
        """The run's secret (an ssh host's agent: over the link, never in its argv);
        for the agent of the head's own machine under Slurm, which srun started before
        the run folder existed, where to write that the head is away."""
        if isinstance(msg.get("secret"), str) and isinstance(msg.get("epoch"), int):
            self.door.told(msg["secret"], msg["epoch"])
        if isinstance(msg.get("away_note"), str):
            self.noted(msg["away_note"])

    def on_stopping(self, msg: dict) -> None:
        """The job is stopping: what still waits for its zygote is not started (the
        hands ask ``stopping`` before each start, as the head's own do)."""
        self.stopping()

    def on_tell(self, msg: dict) -> None:
        """A line from the head down to a process's library (head/downlink.py)."""
        if isinstance(msg.get("message"), dict):
            self.relay.tell(str(msg.get("name")), msg["message"])
            self.breaks.told(str(msg.get("name")), msg["message"])

    def on_keeper(self, msg: dict) -> None:
        """Start the worlds' stores' keeper (``mwrun.keeper``) on this host, the store
        host: forked from the zygote of ``modules`` (one that imports torch: no second
        import), else cold. It connects to the head itself (its ``args`` say where);
        its output goes to ``log``. Told back: ``kept {pid}`` or ``kept {error}``."""
        try:
            args = [str(a) for a in msg["args"]]
            modules = tuple(str(m) for m in msg.get("modules") or ())
            env = {str(k): str(v) for k, v in (msg.get("env") or os.environ).items()}
            log = str(msg["log"])
        except (KeyError, TypeError, AttributeError) as exc:
            self.link.send(Kind.KEPT, error=f"the keeper could not be started: {exc}")
            return
        helpers.start(self.hands, [sys.executable, "-m", KEEPER, *args], ("module", KEEPER, args),
                      modules, env, log, self._kept, lambda why: self.link.send(
                          Kind.KEPT, error=f"the keeper could not be started: {why}"))

    def _kept(self, pid: int, warm: bool) -> None:
        with contextlib.suppress(OSError):  # gone already: its head hears of it anyway
            self.keeper = os.pidfd_open(pid)  # never another process that took its pid
        self.link.send(Kind.KEPT, pid=pid, warm=warm)

    def end_keeper(self) -> None:
        """SIGTERM to the keeper this agent started, if any: the job ends while its
        head is away, and a keeper's end is otherwise its head's to tell."""
        if self.keeper is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.keeper, signal.SIGTERM)
            os.close(self.keeper)
            self.keeper = None

    def on_clock(self, msg: dict) -> None:
        """At once: the head measures our clock's offset from its own (head/clocks.py)."""
        self.link.send(Kind.CLOCK, sent=msg.get("sent"), at=self.wall())
