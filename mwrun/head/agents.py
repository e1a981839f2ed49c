"""Every remote host's agent as the head's loop sees it: hands like the local ones.

``Agents`` turns the loop's requests for a remote process (spawn, signal, probe) into
frames to that host's agent, and the agent's frames back into the loop's events (output
lines, exits, the library's heartbeats and world events). A host whose link closes or
falls silent is *lost*: each of its live processes fails with ``host NAME lost``,
which breaks their worlds at once, and the head keeps trying to reach the host again
(with backoff); restart policies apply once it is back.
"""

from __future__ import annotations

import contextlib
import selectors
import time

from mwrun.errors import StartError
from mwrun.head import control
from mwrun.head.remote import AgentLink, check_hello
from mwrun.host import frames
from mwrun.plan import environment, preload
from mwrun.schema import HostState as H

ANSWER_WAIT = 10.0  # seconds a connecting agent has to say hello
RECONNECT_FIRST, RECONNECT_CAP = 1.0, 30.0


class RemoteHandle:
    """A process on a remote host, with the face of a local ``ProcessHandle``."""

    remote = True

    def __init__(self, agents: Agents, host: str, name: str, pid: int | None):
        self.agents, self.host, self.name, self.pid = agents, host, name, pid
        self.warm = False  # forked from its host's zygote
        self.seen: str | None = None  # its /proc state, as its agent last answered
        self.probing = False  # a probe is on its way
        self.code: int | None = None
        self.cpu: float | None = None
        self.rss: int | None = None

    def signal(self, sig: int) -> None:
        self.agents.send(self.host, "signal", name=self.name, signal=int(sig))

    def returncode(self) -> int | None:
        return self.code

    def status(self) -> str | None:
        return self.agents.probe(self)

    def usage(self) -> tuple[float | None, int | None]:
        return self.cpu, self.rss


class Agents:
    def __init__(self, links: dict[str, AgentLink], loop):
        self.links = links  # host name -> link (up, or lost and being retried)
        self.loop = loop
        self.selector: selectors.BaseSelector | None = None
        self.pending: list[tuple[AgentLink, dict]] = []  # frames read while awaiting one
        self.handles: dict[str, RemoteHandle] = {}
        self.retry_at: dict[str, float] = {}
        self.retries: dict[str, int] = {}
        self.steps = None  # under Slurm: head.slurm.Steps, the sruns that start agents
        self.rejoins: dict = {}  # host -> head.slurm.Rejoin under way

    def hosts(self) -> set[str]:
        return set(self.links)

    def attach(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        for link in self.links.values():
            link.heard = time.monotonic()  # the bring-up was no silence of theirs
            self._watch(link)

    def _watch(self, link: AgentLink) -> None:
        self.selector.register(link.out_fd, selectors.EVENT_READ, (self._readable, link))
        if link.err_fd >= 0:  # an ssh link: what ssh and the remote python say
            self.selector.register(link.err_fd, selectors.EVENT_READ, (self._stderr, link))

    def up(self, host: str) -> bool:
        return self.links[host].state == H.UP

    # -- requests ------------------------------------------------------------------------

    def send(self, host: str, kind: str, **fields) -> None:
        link = self.links[host]
        if link.state == H.UP:
            link.send(kind, **fields)

    def _env(self, name: str, generations: dict, restarts: int) -> dict:
        """What mwrun sets for the process, for its agent to lay over its host's own
        environment (its PATH, HOME), not the head's."""
        link = self.links[self.loop.plan.processes[name].host]
        return environment.process_env(self.loop.plan, name, {}, run_id=self.loop.run_id,
                                       control=link.hello["control"] if link.hello else "",
                                       generations=generations, restart_count=restarts)

    def _spec(self, name: str, generations: dict, restarts: int) -> dict:
        """How the agent starts the process: its environment (and what of the host's own
        mwrun's names replace) and, if it may, warm from the host's zygote."""
        proc = self.loop.plan.processes[name]
        link = self.links[proc.host]
        return {"env": self._env(name, generations, restarts),
                "unset": list(environment.OWNED + environment.OWNED_MWRUN),
                "unset_prefixes": list(environment.OWNED_PREFIXES),
                "preload": list(proc.preload),
                "warm": preload.target(proc.cmd, link.python) if proc.preload else None}

    def prepare(self, name: str, generations: dict) -> None:
        """Have the process's host start the zygote it will be forked from, now."""
        proc = self.loop.plan.processes[name]
        if proc.preload and self.up(proc.host):
            self.send(proc.host, "prepare", **self._spec(name, generations, 0))

    def start(self, name: str, generations: dict, restarts: int) -> RemoteHandle:
        """Ask the process's host to start it and return at once: its pid arrives with
        the agent's ``spawned`` (or ``failed``), however long that takes (a zygote
        still importing, an agent stalled for a while). While the link lives the start
        stays pending; a lost host fails it like any of its processes."""
        proc = self.loop.plan.processes[name]
        link = self.links[proc.host]
        if link.state != H.UP:
            raise StartError(f"host {proc.host} is not reachable")
        link.send("spawn", name=name, argv=list(proc.cmd), cwd=proc.cwd,
                  cpus=sorted(proc.cpus) if proc.cpus is not None else None,
                  **self._spec(name, generations, restarts))
        handle = RemoteHandle(self, proc.host, name, None)
        self.handles[name] = handle
        return handle

    def probe(self, handle: RemoteHandle) -> str | None:
        """What its agent last said of the process in /proc (never waits: the answer to
        the probe asked now arrives for the next look)."""
        link = self.links[handle.host]
        if link.state == H.UP and handle.code is None and handle.pid is not None \
                and not handle.probing:
            handle.probing = True
            link.send("probe", name=handle.name)
        return handle.seen

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
        elif kind == "lines" and handle is not None:
            for line in msg["lines"]:
                self.loop.printer.line(name, line)
        elif kind == "spawned" and handle is not None and handle.pid is None:
            handle.pid, handle.warm = msg.get("pid"), bool(msg.get("warm"))
            self.loop.remote_spawned(name, handle.pid, handle.warm)
        elif kind == "failed" and handle is not None and handle.pid is None:
            del self.handles[name]
            self.loop.remote_failed(name, str(msg.get("error")))
        elif kind == "exited" and handle is not None:
            handle.code = msg["code"]
            del self.handles[name]
            self.loop.remote_exited(name, handle.code)
        elif kind == "control":  # the library's messages, one or held together
            requests = [msg.get("request")] if "request" in msg else msg.get("requests")
            for request in requests if isinstance(requests, list) else ():
                control.relayed(self.loop, request)
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
        self.retries.pop(link.name, None)
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
                self.loop.remote_lost(name, f"host {link.name} lost")

    def _drop(self, link: AgentLink) -> None:
        for fd in (link.out_fd, link.err_fd):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fd)
        link.close(wait=0.0)  # a stalled agent must not stall the head
        link.state = H.LOST
        tries = self.retries.get(link.name, 0)
        self.retries[link.name] = tries + 1
        self.retry_at[link.name] = time.monotonic() + min(RECONNECT_FIRST * 2 ** tries,
                                                          RECONNECT_CAP)

    def _reconnect(self, link: AgentLink) -> None:
        if not link.argv:  # an agent srun started: a new srun step starts it again
            self.retry_at[link.name] = float("inf")  # until that attempt ends
            if self.steps is not None:
                self.rejoins[link.name] = self.steps.rejoin(link.name)
            return
        fresh = AgentLink(link.name, link.argv, link.python)
        try:
            fresh.start()
        except OSError:
            self._drop(fresh)
            self.links[link.name] = fresh
            return
        fresh.heard = time.monotonic()
        self.links[link.name] = fresh
        self._watch(fresh)

    def _rejoined(self, old: AgentLink, attempt) -> None:
        if attempt.link is None:
            self.loop.say(f"host {old.name}: not reached again: {attempt.error}")
            self._drop(old)  # the next try, after the backoff
            return
        attempt.link.heard = time.monotonic()
        self.links[old.name] = attempt.link
        self._watch(attempt.link)
        self.retries.pop(old.name, None)
        self.loop.say(f"host {old.name} is reachable again")

    def refresh_usage(self) -> None:
        for handle in self.handles.values():
            if handle.pid is not None:
                self.send(handle.host, "probe", name=handle.name)

    def pids(self) -> dict[str, int]:
        return {name: link.hello.get("pid") for name, link in self.links.items()
                if link.hello and link.state == H.UP}

    def states(self) -> dict[str, str]:
        return {name: link.state for name, link in self.links.items()}

    def close(self) -> None:
        for link in self.links.values():
            for fd in (link.out_fd, link.err_fd):
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(fd)
            link.close()
        if self.steps is not None:
            self.steps.close()  # its agents have been told to stop
