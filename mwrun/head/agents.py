"""Every remote host's agent as the head's loop sees it: hands like the local ones.

``Agents`` has the face of ``host.hands.Hands`` (``loop.HostHands``): it turns the
loop's requests for a remote process (prepare, start from a ``LaunchSpec``, signal,
status) into frames to that host's agent, which starts it with the same ``Hands``
there, and the agent's frames back into what the same hands tell locally (spawned,
failed, lines, exited) plus the library's heartbeats and world events. Nothing waits:
a start's pid, a status, a usage reading arrive later and are told or kept.

A host whose link closes or falls silent is *lost*: each of its live processes fails
with ``host NAME lost``, which breaks their worlds at once, and the head keeps trying
to reach the host again (with backoff); restart policies apply once it is back.
"""

from __future__ import annotations

import contextlib
import selectors
import signal
import time
from collections.abc import Callable
from typing import Protocol

from mwrun.errors import StartError
from mwrun.head import control
from mwrun.head.clocks import Offset
from mwrun.head.remote import AgentLink, check_hello
from mwrun.host import frames
from mwrun.launchspec import LaunchSpec
from mwrun.schema import HostState as H

ANSWER_WAIT = 10.0  # seconds a connecting agent has to say hello
RECONNECT_FIRST, RECONNECT_CAP = 1.0, 30.0


class RemoteHandle:
    """A process on a remote host, as its agent last told of it."""

    def __init__(self, agents: Agents, host: str, name: str, pid: int | None):
        self.agents, self.host, self.name, self.pid = agents, host, name, pid
        self.warm = False  # forked from its host's zygote
        self.seen: str | None = None  # its /proc state, as its agent last answered
        self.probing = False  # a probe is on its way
        self.code: int | None = None
        self.cpu: float | None = None
        self.rss: int | None = None


class Attempt(Protocol):
    """A lost host's agent being started again: once ``done()``, its ``link`` (saying
    hello, or already checked) or the ``error`` that kept it away."""

    @property
    def link(self) -> AgentLink | None: ...
    @property
    def error(self) -> str | None: ...
    def done(self) -> bool: ...


class Reach(Protocol):
    """How a host is reached again after a loss: the transport's part (``remote.SshReach``
    for ssh, ``slurm.Steps`` for Slurm; a new transport, e.g. pods connecting back, is one
    more). ``again`` never waits: the loop asks the attempt ``done()`` on every tick."""

    def again(self, link: AgentLink) -> Attempt: ...
    def close(self, wait: float = ...) -> None: ...


class Agents:
    def __init__(self, links: dict[str, AgentLink], loop, reach: Reach,
                 host_of: Callable[[str], str], selector: selectors.BaseSelector):
        self.links = links  # host name -> link (up, or lost and being retried)
        self.loop = loop  # told what the agents tell (host.hands.Owner, and lost)
        self.reach = reach  # how a lost host's agent is started again
        self.host_of = host_of  # process -> its host (in the plan as it is now)
        self.selector = selector  # the loop's: the links are watched there once attached
        self.pending: list[tuple[AgentLink, dict]] = []  # frames read while awaiting one
        self.handles: dict[str, RemoteHandle] = {}
        self.retry_at: dict[str, float] = {}
        self.retries: dict[str, int] = {}
        self.rejoins: dict[str, Attempt] = {}  # host -> its agent being started again
        self.moves = 0  # host state changes so far: state.json compares this, not them all
        self.offsets: dict[str, Offset] = {}  # host -> its clock's offset (clocks.py)

    def hosts(self) -> set[str]:
        return set(self.links)

    def attach(self) -> None:
        """Start watching the links (once the loop runs)."""
        for link in self.links.values():
            link.heard = time.monotonic()  # the bring-up was no silence of theirs
            self._watch(link)
            if link.state == H.UP:
                self._measure(link, fresh=True)

    def _watch(self, link: AgentLink) -> None:
        self.selector.register(link.out_fd, selectors.EVENT_READ, (self._readable, link))
        if link.err_fd >= 0:  # an ssh link: what ssh and the remote python say
            self.selector.register(link.err_fd, selectors.EVENT_READ, (self._stderr, link))

    def _measure(self, link: AgentLink, fresh: bool = False) -> None:
        """Ask the agent its clock (a new agent: measured afresh), see clocks.py."""
        if fresh:
            self.offsets[link.name] = Offset()
        link.send("clock", sent=self.loop.wall())

    def to_head(self, host: str, t) -> float | None:
        """A time on ``host``'s clock (as its agent, or a process there, told it), on the
        head's; None for what is not a time. Told in a frame that has just arrived, so
        never later than now: the measured offset is good to a few milliseconds, and
        without this bound a remote exit could land after the break the head wrote
        because of it (a fault's phases out of order)."""
        t = _number(t)
        offset = self.offsets.get(host)
        return t if t is None or offset is None else min(offset.to_head(t), self.loop.wall())

    def up(self, host: str) -> bool:
        return self.links[host].state == H.UP

    # -- requests ------------------------------------------------------------------------

    def send(self, host: str, kind: str, **fields) -> None:
        link = self.links[host]
        if link.state == H.UP:
            link.send(kind, **fields)

    def control_path(self, host: str) -> str:
        """Where the library reaches its supervisor on ``host``: its agent's socket."""
        link = self.links[host]
        return link.hello["control"] if link.hello else ""

    def prepare(self, spec: LaunchSpec) -> None:
        """Have the process's host start the zygote it will be forked from, now."""
        host = self.host_of(spec.name)
        if spec.preload and self.up(host):
            self.send(host, "prepare", **spec.to_fields())

    def start(self, spec: LaunchSpec) -> None:
        """Ask the process's host to start it and return at once: its pid arrives with
        the agent's ``spawned`` (or ``failed``), however long that takes (a zygote
        still importing, an agent stalled for a while). While the link lives the start
        stays pending; a lost host fails it like any of its processes."""
        host = self.host_of(spec.name)
        link = self.links[host]
        if link.state != H.UP:
            raise StartError(f"host {host} is not reachable")
        link.send("spawn", **spec.to_fields())
        self.handles[spec.name] = RemoteHandle(self, host, spec.name, None)

    def signal(self, name: str, sig: int) -> None:
        handle = self.handles.get(name)
        if handle is not None:
            self.send(handle.host, "signal", name=name, signal=int(sig))

    def tell(self, name: str, message: dict) -> bool:
        """A line down to the library of process ``name`` on its host (downlink.py);
        False when it runs on no remote host."""
        handle = self.handles.get(name)
        if handle is None:
            return False
        self.send(handle.host, "tell", name=name, message=message)
        return True

    def status(self, name: str) -> str | None:
        """What its agent last said of the process in /proc (never waits: the answer to
        the probe asked now arrives for the next look)."""
        handle = self.handles.get(name)
        if handle is None:
            return None
        link = self.links[handle.host]
        if link.state == H.UP and handle.code is None and handle.pid is not None \
                and not handle.probing:
            handle.probing = True
            link.send("probe", name=handle.name)
        return handle.seen

    def usage(self, name: str) -> tuple[float | None, int | None]:
        handle = self.handles.get(name)
        return (handle.cpu, handle.rss) if handle is not None else (None, None)

    # -- events ----------------------------------------------------------------------------

    def _readable(self, link: AgentLink) -> None:
        try:
            messages = link.read()
        except frames.FrameError:
            messages = None
        if messages is None:
            self._lost(link, "its link closed")
            return
        self.pending.extend((link, m) for m in messages)
        self.handle_pending()

    def _stderr(self, link: AgentLink) -> None:
        if not link.read_stderr():
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(link.err_fd)

    def handle_pending(self) -> None:
        while self.pending:
            link, msg = self.pending.pop(0)
            if link.state == H.CONNECTING:
                self._hello(link, msg)
            elif msg["kind"] == "closed":
                self._lost(link, "its link closed")
            elif link.state == H.UP:
                self._dispatch(link, msg)

    def _dispatch(self, link: AgentLink, msg: dict) -> None:
        kind, name = msg["kind"], msg.get("name")
        handle = self.handles.get(name) if name else None
        if kind == "say":  # what the agent tells the user (its zygotes)
            self.loop.say(f"host {link.name}: {msg.get('text')}")
        elif kind == "lines" and handle is not None and isinstance(msg.get("lines"), list):
            self.loop.lines(name, [str(line) for line in msg["lines"]])
        elif kind == "spawned" and handle is not None and handle.pid is None:
            handle.pid, handle.warm = msg.get("pid"), bool(msg.get("warm"))
            self.loop.spawned(name, handle.pid, handle.warm,
                              at=self.to_head(link.name, msg.get("t")))
        elif kind == "failed" and handle is not None and handle.pid is None:
            del self.handles[handle.name]
            self.loop.failed(handle.name, str(msg.get("error")))
        elif kind == "exited" and handle is not None:
            handle.code = msg["code"]
            del self.handles[handle.name]
            self.loop.exited(handle.name, msg["code"], at=self.to_head(link.name, msg.get("t")))
        elif kind == "control":  # the library's messages, one or held together
            requests = [msg.get("request")] if "request" in msg else msg.get("requests")
            for request in requests if isinstance(requests, list) else ():
                control.relayed(self.loop, request)
        elif kind == "clock":
            offset = self.offsets.setdefault(link.name, Offset())
            sent, at = _number(msg.get("sent")), _number(msg.get("at"))
            if sent is not None and at is not None:
                offset.add(sent, at, self.loop.wall())
                if offset.wanted:
                    self._measure(link)
        elif kind == "probed" and handle is not None:
            handle.cpu, handle.rss = msg.get("cpu"), msg.get("rss")
            handle.seen, handle.probing = msg.get("status"), False

    def _hello(self, link: AgentLink, msg: dict) -> None:
        why = check_hello(link, msg)
        if why:
            self.loop.say(f"host {link.name}: {why}")
            self._drop(link)
            return
        link.hello, link.state = msg, H.UP
        self.moves += 1
        self.retries.pop(link.name, None)
        self._measure(link, fresh=True)
        self.loop.say(f"host {link.name} is reachable again")

    def tick(self, now: float) -> None:
        """Beat on every link; take a silent one for lost; retry lost hosts when due."""
        for name, attempt in list(self.rejoins.items()):
            if attempt.done():
                del self.rejoins[name]
                self._rejoined(self.links[name], attempt)
        for link in self.links.values():
            if link.state == H.UP:
                if now - link.sent_at >= frames.BEAT:  # any frame is a beat
                    link.send("beat")
                if time.monotonic() - link.heard > frames.SILENCE:
                    self._lost(link, f"silent for {frames.SILENCE:g}s")
            elif link.state == H.LOST and self.retry_at.get(link.name, 0) <= now:
                self._reconnect(link)
            elif link.state == H.CONNECTING and now - link.heard > ANSWER_WAIT:
                self._drop(link)

    def _lost(self, link: AgentLink, why: str) -> None:
        if link.state == H.UP:
            self.loop.say(f"host {link.name} lost: {why}")
        self._drop(link)
        for name, handle in list(self.handles.items()):
            if handle.host == link.name:
                del self.handles[name]
                self.loop.lost(name, f"host {link.name} lost")

    def _drop(self, link: AgentLink) -> None:
        for fd in (link.out_fd, link.err_fd):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fd)
        link.close(wait=0.0)  # a stalled agent must not stall the head
        link.state = H.LOST
        self.moves += 1
        tries = self.retries.get(link.name, 0)
        self.retries[link.name] = tries + 1
        self.retry_at[link.name] = time.monotonic() + min(RECONNECT_FIRST * 2 ** tries,
                                                          RECONNECT_CAP)

    def _reconnect(self, link: AgentLink) -> None:
        self.retry_at[link.name] = float("inf")  # until that attempt ends
        self.rejoins[link.name] = self.reach.again(link)

    def _rejoined(self, old: AgentLink, attempt: Attempt) -> None:
        """An attempt ended: the new link (still to say hello, or checked already), or
        the next try after the backoff."""
        if attempt.link is None:
            self.loop.say(f"host {old.name}: not reached again: {attempt.error}")
            self._drop(old)
            return
        attempt.link.heard = time.monotonic()
        self.links[old.name] = attempt.link
        self.moves += 1
        self._watch(attempt.link)
        if attempt.link.state == H.UP:  # checked by its transport (a connect-back)
            self.retries.pop(old.name, None)
            self._measure(attempt.link, fresh=True)
            self.loop.say(f"host {old.name} is reachable again")

    def refresh_usage(self) -> None:
        for handle in self.handles.values():
            if handle.pid is not None:
                self.send(handle.host, "probe", name=handle.name)

    def pids(self) -> dict[str, int | None]:
        return {name: link.hello.get("pid") for name, link in self.links.items()
                if link.hello and link.state == H.UP}

    def states(self) -> dict[str, str]:
        return {name: link.state for name, link in self.links.items()}

    def close(self) -> dict[str, int]:
        """Tell every agent to stop (each kills what it still runs) and end the links;
        the exit of each process not yet told: its last known code, else SIGKILL's."""
        for link in self.links.values():
            for fd in (link.out_fd, link.err_fd):
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(fd)
            link.close()
        self.reach.close()  # under Slurm, the srun steps: their agents were told to stop
        codes = {name: -signal.SIGKILL if h.code is None else h.code
                 for name, h in self.handles.items()}
        self.handles.clear()
        return codes


def _number(value) -> float | None:
    """A time an agent told, or None for anything else (a bool, a string, NaN)."""
    return float(value) if type(value) in (int, float) and value == value else None
