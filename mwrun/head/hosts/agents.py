"""Every host's agent as the head's loop sees it (the head's own machine has one too).

``Agents`` is the router's ``Hands``: it turns the loop's requests for a process
(prepare, start from a ``LaunchSpec``, signal, status) into frames to that host's
agent, which starts it with its ``host.hands.Hands``, and the agent's frames back into
what those hands tell (spawned, failed, lines, exited) plus the library's heartbeats
and world events. Nothing waits:
a start's pid, a status, a usage reading arrive later and are told or kept.

It is made of three parts, and routes each frame that arrives to the one it is for:
the links over their life (``links.Links``: up, lost, reached again), the processes
on the remote hosts (``remotebook.RemoteProcesses``) and the hosts' clocks
(``hostclocks.Clocks``).

A host whose link closes or falls silent is *lost*: each of its live processes fails
with ``host NAME lost``, which breaks their worlds at once, and the head keeps trying
to reach the host again (with backoff); restart policies apply once it is back.
"""

from __future__ import annotations

import selectors
from collections.abc import Callable
from typing import Protocol

from mwrun.head.hosts.hostclocks import Clocks
from mwrun.head.hosts.links import Links, Reach
from mwrun.head.hosts.remote import AgentLink
from mwrun.head.hosts.remotebook import KINDS, RemoteProcesses, Told
from mwrun.host.frames import Kind
from mwrun.launchspec import LaunchSpec
from mwrun.schema import HostState as H

__all__ = ["Agents", "Head", "Reach"]  # Reach: how a lost host is reached again


class Head(Told, Protocol):
    """What the agents tell the head's loop: what became of its remote processes, what
    the agents say to the user; and the head's wall clock (the hosts' clocks are
    measured against it)."""

    def say(self, text: str) -> None: ...
    def wall(self) -> float: ...


class Agents:
    def __init__(self, links: dict[str, AgentLink], loop: Head, reach: Reach,
                 host_of: Callable[[str], str], selector: selectors.BaseSelector,
                 relayed: Callable[[object], None],
                 captured: Callable[[object, object, dict], None] = lambda *_: None,
                 kept: Callable[[dict], None] = lambda told: None,
                 secret: tuple[str, int] | None = None,
                 noted: Callable[[str, dict], None] = lambda host, hello: None,
                 away: tuple[str, str] | None = None):
        self.loop = loop  # told what the agents tell
        # The run's secret and this head's epoch: told to each remote host's agent once
        # it is reached (at launch, or again), so that a new head can adopt it there.
        self.secret = secret
        self.noted = noted  # where each agent is, for a new head (the run folder's AGENTS)
        # (host, path): the agent of the head's own machine, when a remote link reaches
        # it (Slurm's), writes there that the head is away (host/absence.py).
        self.away = away
        # The library's messages a host's agent relayed: served as the head's own
        # socket serves them (serve/dispatcher.py), handed in so hosts never import serve.
        self.relayed = relayed
        self.captured = captured  # an agent's reading of stacks, for a bundle (postmortem.py)
        self.kept = kept  # the store host's agent started the stores' keeper (stores.py)
        self.host_of = host_of  # process -> its host (in the plan as it is now)
        self.clocks = Clocks(loop.wall)
        self.links = Links(links, reach, selector, self, loop.say)
        self.processes = RemoteProcesses(self.links, loop, self.clocks.to_head)
        self.pending: list[tuple[AgentLink, dict]] = []  # frames read while awaiting one
        self.halting = False  # the job is stopping: every agent is told, one reached later too
        self.keeping: str | None = None  # the host asked for the keeper, until it answers

    # -- the hosts ---------------------------------------------------------------------------

    def hosts(self) -> set[str]:
        return self.links.hosts()

    def up(self, host: str) -> bool:
        return self.links.up(host)

    def control_path(self, host: str) -> str:
        """Where the library reaches its supervisor on ``host``: its agent's socket."""
        return self.links.control_path(host)

    def to_head(self, host: str, t) -> float | None:
        """A time on ``host``'s clock, on the head's (hostclocks.py)."""
        return self.clocks.to_head(host, t)

    def pids(self) -> dict[str, int | None]:
        return self.links.pids()

    def states(self) -> dict[str, str]:
        return self.links.states()

    @property
    def moves(self) -> int:
        """Host state changes so far: state.json compares this, not them all."""
        return self.links.moves

    def attach(self) -> None:
        """Start watching the links (once the loop runs)."""
        self.links.attach()

    def unsent(self) -> bool:
        """Whether frames still wait for a link to take them (links.Links.unsent)."""
        return self.links.unsent()

    def tick(self, now: float) -> None:
        """Beat on every link; take a silent one for lost; retry lost hosts when due."""
        self.links.tick(now)

    def keeper(self, host: str, asked: dict) -> None:
        """Ask ``host``'s agent (the store host's) to start the worlds' stores' keeper;
        it answers ``kept`` (host/asks.py)."""
        if self.links.up(host):
            self.keeping = host
            self.links.send(host, Kind.KEEPER, **asked)
        else:
            self.kept({"error": f"host {host}, which keeps the worlds' stores, is not up"})

    def stopping(self) -> None:
        """The job is stopping: every host's agent starts nothing more that still waits
        for its zygote (a start made as the stop began is SIGTERMed there)."""
        self.halting = True
        for host in self.hosts():
            self.links.send(host, Kind.STOPPING)

    # -- the processes -----------------------------------------------------------------------

    def prepare(self, spec: LaunchSpec) -> None:
        """Have the process's host start the zygote it will be forked from, now."""
        self.processes.prepare(self.host_of(spec.name), spec)

    def start(self, spec: LaunchSpec) -> None:
        """Ask the process's host to start it and return at once (remotebook.py)."""
        self.processes.start(self.host_of(spec.name), spec)

    def adopt(self, name: str, pid: int | None, warm: bool, host: str) -> None:
        """A start ``host``'s agent runs already (a new head's, remotebook.py)."""
        self.processes.adopt(host, name, pid, warm)

    def signal(self, name: str, sig: int) -> None:
        self.processes.signal(name, sig)

    def capture(self, name: str, key: str, pid: int, native: bool, within: float) -> str | None:
        return self.processes.capture(name, key, pid, native, within)

    def tell(self, name: str, message: dict) -> bool:
        """A line down to the library of process ``name`` on its host (downlink.py);
        False when it runs on no remote host."""
        return self.processes.tell(name, message)

    def status(self, name: str) -> str | None:
        return self.processes.status(name)

    def usage(self, name: str) -> tuple[float | None, int | None]:
        return self.processes.usage(name)

    def refresh_usage(self) -> None:
        self.processes.refresh_usage()

    # -- what the links tell (links.Listener) ------------------------------------------------

    def arrived(self, link: AgentLink, messages: list[dict]) -> None:
        self.pending.extend((link, m) for m in messages)
        self.handle_pending()

    def reached(self, link: AgentLink) -> None:
        self.clocks.measure(link, fresh=True)
        if link.hello is not None:  # (a fresh agent after a loss: a new door)
            self.noted(link.name, link.hello)
        if self.secret is not None and not link.local:  # (its own, never in an argv)
            note = {"away_note": self.away[1]} \
                if self.away is not None and self.away[0] == link.name else {}
            link.send(Kind.SECRET, secret=self.secret[0], epoch=self.secret[1], **note)
        if self.halting:
            link.send(Kind.STOPPING)

    def host_lost(self, host: str) -> None:
        self.processes.lost(host)
        if self.keeping == host:  # lost before it answered: the keeper's start with it
            self.keeping = None
            self.kept({"error": f"host {host}, which keeps the worlds' stores, was lost"
                                " before it started their keeper"})

    def handle_pending(self) -> None:
        while self.pending:
            link, msg = self.pending.pop(0)
            if link.state == H.CONNECTING:
                self.links.hello(link, msg)
            elif msg["kind"] == Kind.CLOSED:
                self.links.lost(link, "its link closed")
            elif link.state == H.UP:
                self._dispatch(link, msg)

    def _dispatch(self, link: AgentLink, msg: dict) -> None:
        kind = msg["kind"]
        if kind == Kind.SAY:  # what the agent tells the user (its zygotes)
            self.loop.say(str(msg.get("text")) if link.local
                          else f"host {link.name}: {msg.get('text')}")
        elif kind in KINDS:
            self.processes.heard(link.name, msg)
        elif kind == Kind.CONTROL:  # the library's messages, one or held together
            requests = [msg.get("request")] if "request" in msg else msg.get("requests")
            for request in requests if isinstance(requests, list) else ():
                self.relayed(request)
        elif kind == Kind.CAPTURED and isinstance(msg.get("result"), dict):
            self.captured(msg.get("key"), msg.get("pid"), msg["result"])
        elif kind == Kind.CLOCK:
            self.clocks.answered(link, msg)
        elif kind == Kind.KEPT:
            self.keeping = None
            self.kept(msg)

    # -- the end -----------------------------------------------------------------------------

    def close(self) -> dict[str, int]:
        """Tell every agent to stop (each kills what it still runs) and end the links;
        the exit of each process not yet told: its last known code, else SIGKILL's."""
        self.links.close()
        return self.processes.close()
