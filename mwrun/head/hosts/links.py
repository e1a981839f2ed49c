"""Every remote host's link over its life, as the head keeps it: watched in the loop's
selector once the loop runs, beaten when quiet, taken for *lost* when it closes or
falls silent (``frames.SILENCE``), and its host reached again with backoff through the
transport's ``Reach`` (ssh, or Slurm), until the new agent's hello is checked.

What a link carries is not read here: its frames go to the ``Listener`` (the agents as
the loop sees them, ``agents.Agents``), which hands a connecting link's first frame
back to ``hello``. The listener also hears of a link up (a new agent: its clock to
measure) and of a host lost (its processes fail).
"""

from __future__ import annotations

import contextlib
import selectors
import time
from collections.abc import Callable
from typing import Any, Protocol

from mwrun.head.hosts.remote import AgentLink, check_hello
from mwrun.host import frames
from mwrun.host.frames import Kind
from mwrun.schema import HostState as H

ANSWER_WAIT = 10.0  # seconds a connecting agent has to say hello
RECONNECT_FIRST, RECONNECT_CAP = 1.0, 30.0


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


class Listener(Protocol):
    """Who hears from the links (``agents.Agents``)."""

    def arrived(self, link: AgentLink, messages: list[dict]) -> None: ...
    def reached(self, link: AgentLink) -> None: ...  # up, with a new agent
    def host_lost(self, host: str) -> None: ...


class Links:
    """The remote hosts' links, by host name: up, lost and being retried, or connecting."""

    def __init__(self, links: dict[str, AgentLink], reach: Reach,
                 selector: selectors.BaseSelector, listener: Listener,
                 say: Callable[[str], None]):
        self.links = links  # host name -> link (up, or lost and being retried)
        self.reach = reach  # how a lost host's agent is started again
        self.selector = selector  # the loop's: the links are watched there once attached
        self.listener = listener
        self.say = say  # to the user
        self.retry_at: dict[str, float] = {}
        self.retries: dict[str, int] = {}
        self.rejoins: dict[str, Attempt] = {}  # host -> its agent being started again
        self.moves = 0  # host state changes so far: state.json compares this, not them all
        self.ending: list = []  # dropped links' processes (ssh, an agent), to be reaped

    def hosts(self) -> set[str]:
        return set(self.links)

    def up(self, host: str) -> bool:
        return self.links[host].state == H.UP

    def send(self, host: str, kind: str, **fields: Any) -> None:
        link = self.links[host]
        if link.state == H.UP:
            link.send(kind, **fields)

    def send_all(self, host: str, messages: list[dict]) -> None:
        link = self.links[host]
        if link.state == H.UP:
            link.send_all(messages)

    def unsent(self) -> bool:
        """Whether a link still holds frames its pipe or socket could not take at once
        (a bring-up's spawns are more than a pipe holds), after writing what it takes
        now. The loop then looks again soon rather than sleep until the next frame is
        sent: nothing else would send the rest."""
        waiting = False
        for link in self.links.values():
            if link.state == H.UP and link.outbox.size and not link.flush():
                waiting = True
        return waiting

    def control_path(self, host: str) -> str:
        """Where the library reaches its supervisor on ``host``: its agent's socket."""
        link = self.links[host]
        return link.hello["control"] if link.hello else ""

    def pids(self) -> dict[str, int | None]:
        return {name: link.hello.get("pid") for name, link in self.links.items()
                if link.hello and link.state == H.UP}

    def states(self) -> dict[str, str]:
        """Each host's: the head's own machine is ``local`` while its agent is up."""
        return {name: H.LOCAL if link.local and link.state == H.UP else link.state
                for name, link in self.links.items()}

    # -- watched ---------------------------------------------------------------------------

    def attach(self) -> None:
        """Start watching the links (once the loop runs)."""
        for link in self.links.values():
            link.heard = time.monotonic()  # the bring-up was no silence of theirs
            self._watch(link)
            if link.state == H.UP:
                self.listener.reached(link)
            if link.unread:
                unread, link.unread = link.unread, []
                self.listener.arrived(link, unread)

    def _watch(self, link: AgentLink) -> None:
        self.selector.register(link.out_fd, selectors.EVENT_READ, (self._readable, link))
        if link.err_fd >= 0:  # an ssh link: what ssh and the remote python say
            self.selector.register(link.err_fd, selectors.EVENT_READ, (self._stderr, link))

    def _readable(self, link: AgentLink) -> None:
        try:
            messages = link.read()
        except frames.FrameError:
            messages = None
        if messages is None:
            self.lost(link, "its link closed")
            return
        self.listener.arrived(link, messages)

    def _stderr(self, link: AgentLink) -> None:
        if not link.read_stderr():
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(link.err_fd)

    def hello(self, link: AgentLink, msg: dict) -> None:
        """The first frame of a link reached again: its agent's hello, checked."""
        why = check_hello(link, msg)
        if why:
            self.say(f"host {link.name}: {why}")
            self._drop(link)
            return
        link.hello, link.state = msg, H.UP
        self.moves += 1
        self.retries.pop(link.name, None)
        self.listener.reached(link)
        self.say(f"host {link.name} is reachable again")

    def tick(self, now: float) -> None:
        """Beat on every link; take a silent one for lost; retry lost hosts when due;
        reap the processes of links dropped (killed, not waited for)."""
        self.ending = [popen for popen in self.ending if popen.poll() is None]
        for name, attempt in list(self.rejoins.items()):
            if attempt.done():
                del self.rejoins[name]
                self._rejoined(self.links[name], attempt)
        for link in self.links.values():
            if link.state == H.UP:
                if now - link.sent_at >= frames.BEAT:  # any frame is a beat
                    link.send(Kind.BEAT)
                if time.monotonic() - link.heard > frames.SILENCE \
                        and not frames.unread(link.out_fd):  # not our own stall
                    self.lost(link, f"silent for {frames.SILENCE:g}s")
            elif link.state == H.LOST and self.retry_at.get(link.name, 0) <= now:
                self._reconnect(link)
            elif link.state == H.CONNECTING and now - link.heard > ANSWER_WAIT:
                self._drop(link)

    # -- lost, and reached again -------------------------------------------------------------

    def lost(self, link: AgentLink, why: str) -> None:
        if link.state == H.UP:
            self.say(f"host {link.name} lost: {why}")
        self._drop(link)
        self.listener.host_lost(link.name)

    def _drop(self, link: AgentLink) -> None:
        for fd in (link.out_fd, link.err_fd):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fd)
        link.close(wait=0.0)  # a stalled agent must not stall the head
        if link.popen is not None:
            self.ending.append(link.popen)
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
            self.say(f"host {old.name}: not reached again: {attempt.error}")
            self._drop(old)
            return
        attempt.link.heard = time.monotonic()
        self.links[old.name] = attempt.link
        self.moves += 1
        self._watch(attempt.link)
        if attempt.link.state == H.UP:  # checked by its transport (a connect-back)
            self.retries.pop(old.name, None)
            self.listener.reached(attempt.link)
            self.say(f"host {old.name} is reachable again")

    def close(self) -> None:
        """Tell every agent to stop (each kills what it still runs) and end the links."""
        for link in self.links.values():
            for fd in (link.out_fd, link.err_fd):
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(fd)
            link.close()
        self.reach.close()  # under Slurm, the srun steps: their agents were told to stop
