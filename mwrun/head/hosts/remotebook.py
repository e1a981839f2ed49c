"""The processes on remote hosts, as their agents last told of them: what the head asks
of one (prepare its zygote, start it from a ``LaunchSpec``, signal it, probe it, a line
down to its library) becomes a frame to its host, and what its agent tells of it
(spawned, failed, lines, exited, probed) updates its handle and is told to the head's
loop. Nothing waits: a pid, a status, a usage reading arrive later and are told or
kept. The processes of a lost host fail with ``host NAME lost``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any, Protocol

from mwrun.errors import StartError
from mwrun.host.frames import Kind
from mwrun.launchspec import LaunchSpec

KINDS = frozenset({Kind.LINES, Kind.SPAWNED, Kind.FAILED, Kind.EXITED,
                   Kind.PROBED})  # the frames about a process


class Sender(Protocol):
    """The remote hosts' links, as the processes' requests go over them
    (``links.Links``): a frame to a host that is down is not sent."""

    def up(self, host: str) -> bool: ...
    def send(self, host: str, kind: str, **fields: Any) -> None: ...
    def send_all(self, host: str, messages: list[dict]) -> None: ...


class Told(Protocol):
    """Who hears what became of a remote process (the head's loop): what the hands tell
    (``host.hands.Owner``, with when, on the head's clock), or its host lost."""

    def spawned(self, name: str, pid: int, warm: bool, at: float | None = None) -> None: ...
    def failed(self, name: str, error: str) -> None: ...
    def lines(self, name: str, lines: list[str]) -> None: ...
    def exited(self, name: str, code: int, at: float | None = None) -> None: ...
    def lost(self, name: str, reason: str) -> None: ...


class RemoteHandle:
    """A process on a remote host, as its agent last told of it."""

    def __init__(self, host: str, name: str):
        self.host, self.name = host, name
        self.pid: int | None = None  # once its agent said it spawned
        self.warm = False  # forked from its host's zygote
        self.seen: str | None = None  # its /proc state, as its agent last answered
        self.probing = False  # a probe is on its way
        self.code: int | None = None
        self.cpu: float | None = None
        self.rss: int | None = None


class RemoteProcesses:
    """The remote processes' handles, by name: the head's requests out, their news in."""

    def __init__(self, links: Sender, told: Told, to_head: Callable[[str, Any], float | None]):
        self.links = links
        self.told = told
        self.to_head = to_head  # a time a host told, on the head's clock (hostclocks.py)
        self.handles: dict[str, RemoteHandle] = {}  # process -> its handle, until its end

    # -- what the head asks ----------------------------------------------------------------

    def prepare(self, host: str, spec: LaunchSpec) -> None:
        """Have the process's host start the zygote it will be forked from, now."""
        if spec.preload and self.links.up(host):
            self.links.send(host, Kind.PREPARE, **spec.to_fields())

    def start(self, host: str, spec: LaunchSpec) -> None:
        """Ask ``host`` to start the process and return at once: its pid arrives with
        the agent's ``spawned`` (or ``failed``), however long that takes (a zygote
        still importing, an agent stalled for a while). While the link lives the start
        stays pending; a lost host fails it like any of its processes."""
        if not self.links.up(host):
            raise StartError(f"host {host} is not reachable")
        self.links.send(host, Kind.SPAWN, **spec.to_fields())
        self.handles[spec.name] = RemoteHandle(host, spec.name)

    def adopt(self, host: str, name: str, pid: int | None, warm: bool) -> None:
        """A start that ``host``'s agent runs already, taken by a new head
        (``mwrun adopt``): from now on as though this head had asked for it."""
        handle = self.handles[name] = RemoteHandle(host, name)
        handle.pid, handle.warm = pid, warm

    def signal(self, name: str, sig: int) -> None:
        handle = self.handles.get(name)
        if handle is not None:
            self.links.send(handle.host, Kind.SIGNAL, name=name, signal=int(sig))

    def capture(self, name: str, key: str, pid: int, native: bool, within: float) -> str | None:
        """Ask ``name``'s agent to read its stacks from outside (a CAPTURED frame answers,
        head/postmortem.py); why it cannot be asked, or None."""
        handle = self.handles.get(name)
        if handle is None or not self.links.up(handle.host):
            return "its host's agent cannot be reached now"
        self.links.send(handle.host, Kind.CAPTURE, name=name, key=key, pid=pid,
                        native=native, within=within)
        return None

    def tell(self, name: str, message: dict) -> bool:
        """A line down to the library of process ``name`` on its host (downlink.py);
        False when it runs on no remote host."""
        handle = self.handles.get(name)
        if handle is None:
            return False
        self.links.send(handle.host, Kind.TELL, name=name, message=message)
        return True

    def status(self, name: str) -> str | None:
        """What its agent last said of the process in /proc (never waits: the answer to
        the probe asked now arrives for the next look)."""
        handle = self.handles.get(name)
        if handle is None:
            return None
        if self.links.up(handle.host) and handle.code is None and handle.pid is not None \
                and not handle.probing:
            handle.probing = True
            self.links.send(handle.host, Kind.PROBE, name=handle.name)
        return handle.seen

    def usage(self, name: str) -> tuple[float | None, int | None]:
        handle = self.handles.get(name)
        return (handle.cpu, handle.rss) if handle is not None else (None, None)

    def refresh_usage(self) -> None:
        """Each host's processes probed for their usage, in one write a host."""
        probes: dict[str, list[dict]] = {}
        for handle in self.handles.values():
            if handle.pid is not None:
                probes.setdefault(handle.host, []).append({"kind": Kind.PROBE,
                                                           "name": handle.name})
        for host, messages in probes.items():
            self.links.send_all(host, messages)

    # -- what the agents tell ----------------------------------------------------------------

    def heard(self, host: str, msg: dict) -> None:
        """A frame from ``host``'s agent about one of the processes (``KINDS``)."""
        kind, name = msg["kind"], msg.get("name")
        handle = self.handles.get(name) if name else None
        if handle is None:
            return
        if kind == Kind.LINES and isinstance(msg.get("lines"), list):
            self.told.lines(handle.name, [str(line) for line in msg["lines"]])
        elif kind == Kind.SPAWNED and handle.pid is None:
            pid: Any = msg.get("pid")  # as its agent told it
            handle.pid, handle.warm = pid, bool(msg.get("warm"))
            self.told.spawned(handle.name, pid, handle.warm, at=self.to_head(host, msg.get("t")))
        elif kind == Kind.FAILED and handle.pid is None:
            del self.handles[handle.name]
            self.told.failed(handle.name, str(msg.get("error")))
        elif kind == Kind.EXITED:
            handle.code = msg["code"]
            del self.handles[handle.name]
            self.told.exited(handle.name, msg["code"], at=self.to_head(host, msg.get("t")))
        elif kind == Kind.PROBED:
            handle.cpu, handle.rss = msg.get("cpu"), msg.get("rss")
            handle.seen, handle.probing = msg.get("status"), False

    def lost(self, host: str) -> None:
        """``host`` was lost: each of its processes fails (its worlds break at once)."""
        for name, handle in list(self.handles.items()):
            if handle.host == host:
                del self.handles[name]
                self.told.lost(name, f"host {host} lost")

    def close(self) -> dict[str, int]:
        """The exit of each process not yet told: its last known code, else SIGKILL's."""
        codes = {name: -signal.SIGKILL if h.code is None else h.code
                 for name, h in self.handles.items()}
        self.handles.clear()
        return codes
