"""Post-mortem bundles: why a world hung or broke, captured while the evidence lives.

A subscriber of the supervisor's events. When a member is declared hung (``Hung``),
each of its worlds gets a bundle and every member of that world is captured at once:
its library is asked for its threads' stacks and the world call each is in (stacks.py,
the same ask as ``mwrun stacks``), and py-spy reads the members of this host from
outside (host/spy.py: it answers for a stopped member, or one holding the GIL). The
hung member is killed only once its bundle is complete, or after the supervisor's
capture wait (processbook.py keeps that deadline; ``step`` returns who may be killed
now). A break nobody declared (an exit, a timeout a member saw) never waits: its
survivors are captured beside the restart.

Each bundle is written once, when every member answered (or cannot: gone, no library)
or at its deadline, under ``runs/RUN/postmortem/WORLD-gGEN/``: ``bundle.json`` (every
member's stacks from inside and outside, its call, what could not be read and why, the
culprit line), ``stacks.txt`` (the same as ``mwrun stacks`` prints, after the culprit
line), ``logs/NAME.log`` (each member's last lines) and, once the fault closes,
``fault.json`` (its record with phases, faults.py). The history gets a ``postmortem``
record, which ``report`` and ``status`` show.
"""

from __future__ import annotations

import contextlib
import json
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mwrun.head import culprit
from mwrun.head import events as ev
from mwrun.head.records import ProcessRecord, WorldRecord
from mwrun.head.stacks import Ask, Stacks
from mwrun.schema import LOGS, POSTMORTEM, log_name
from mwrun.schema import Event as E
from mwrun.schema import ProcessState as P
from mwrun.stacktext import render

CAPTURE_WAIT = 2.0  # seconds a bundle waits for its members' answers, at most
ENV = "MWRUN_POSTMORTEM"  # "off" in mwrun launch's environment: no bundles, no capture wait
LOG_TAIL = 64 * 1024  # bytes read from the end of each member's log
LOG_LINES = 100
KEEP_WRITTEN = 256  # bundles kept until their fault's record comes


Told = Callable[[object, int, dict], None]  # a capture's answer: (key, pid, result)


class Spies(Protocol):
    """Out-of-process capture (host/spy.py), made with where its answers go."""

    def capture(self, key: object, pid: int, native: bool, within: float) -> str | None: ...
    def tick(self) -> None: ...
    def earliest(self) -> float | None: ...
    def close(self) -> None: ...


class Hosts(Protocol):
    """The members' hosts (the router): which are remote, and their agents' capture."""

    def remote(self, host: str | None) -> bool: ...
    def capture(self, name: str, key: str, pid: int, native: bool, within: float) -> str | None: ...


class Watched(Protocol):
    """What a bundle reads of the job (the supervisor): its processes and worlds."""

    procs: dict[str, ProcessRecord]
    worlds: dict[str, WorldRecord]


@dataclass
class Bundle:
    world: str
    generation: int
    hung: str | None  # the member declared hung (its kill waits), if any
    why: str  # the hang's reason, or the break's
    at: float  # wall clock when declared
    started: float  # monotonic
    ask: Ask
    outside: dict[str, dict | None] = field(default_factory=dict)  # None: under way
    outside_why: dict[str, str] = field(default_factory=dict)  # not captured from outside
    broke: str | None = None  # the break that followed (or came first)
    written: Path | None = None

    @property
    def name(self) -> str:
        return f"{self.world}-g{self.generation}"


class Postmortems:
    def __init__(self, run_dir: Path, stacks: Stacks, spies: Callable[[Told], Spies],
                 job: Callable[[], Watched], hosts: Callable[[], Hosts],
                 record: Callable[[dict], None], now: Callable[[], float],
                 wall: Callable[[], float], wait: float = CAPTURE_WAIT,
                 env: Mapping[str, str] = os.environ):
        self.folder = run_dir / POSTMORTEM
        self.logs = run_dir / LOGS
        self.stacks, self.spies, self.job = stacks, spies(self.outside_told), job
        self.hosts, self.record = hosts, record
        self.now, self.wall = now, wall
        self.wait = 0.0 if env.get(ENV) == "off" else wait  # the supervisor's capture wait
        self.open: dict[tuple[str, int], Bundle] = {}
        self.keys: dict[str, tuple[tuple[str, int], str]] = {}  # a capture's key -> whose
        self.written: dict[tuple[str, int], Bundle] = {}  # kept for the fault record
        self.latest: dict[str, dict] = {}  # world -> its last bundle (status shows it)
        self.changes = 0  # state.json compares this

    # -- what starts a bundle -----------------------------------------------------------

    def __call__(self, event: ev.Event) -> None:
        if not self.wait:
            return  # turned off
        match event:
            case ev.Hung(process, why):
                job = self.job()
                rec = job.procs.get(process)
                for world in list(rec.plan.worlds) if rec is not None else ():
                    if world in job.worlds:
                        self._begin(world, job.worlds[world].generation, process, why)
            case ev.WorldBroken(world, generation, reason):
                bundle = self.open.get((world, generation)) or \
                    self.written.get((world, generation))
                if bundle is not None:
                    bundle.broke = bundle.broke or reason
                elif world in self.job().worlds:
                    self._begin(world, generation, None, reason)

    def _begin(self, world: str, generation: int, hung: str | None, why: str) -> None:
        key = (world, generation)
        if key in self.open or key in self.written:
            return
        job = self.job()
        members = [job.procs[m] for m in job.worlds[world].plan.members if m in job.procs]
        bundle = Bundle(world, generation, hung, why, self.wall(), self.now(),
                        self.stacks.start(members))
        self.open[key] = bundle
        for rec in members:
            name = rec.plan.name
            if rec.pid is None or not rec.state.alive:
                why = rec.why or rec.state.value
                bundle.outside_why[name] = f"not running when captured: {why}"
            else:
                self._capture(bundle, rec, name == hung)

    def _capture(self, bundle: Bundle, rec: ProcessRecord, native: bool) -> None:
        """Read ``rec`` from outside: here, or by its host's agent (host/spy.py)."""
        name, host = rec.plan.name, rec.plan.host
        key = f"{bundle.name}/{name}"
        self.keys[key] = ((bundle.world, bundle.generation), name)
        pid = typing.cast(int, rec.pid)
        if self.hosts().remote(host):
            missing = self.hosts().capture(name, key, pid, native, self.wait)
            missing = None if missing is None else f"on host {host}: {missing}"
        else:
            missing = self.spies.capture(key, pid, native, self.wait)
        if missing is None:
            bundle.outside[name] = None
        else:
            bundle.outside_why[name] = missing

    # -- what comes back ----------------------------------------------------------------

    def outside_told(self, key: object, pid: object, result: dict) -> None:
        """py-spy's answer for one member, here (host/spy.py's ``done``) or from its
        host's agent (a CAPTURED frame)."""
        found = self.keys.pop(str(key), None)
        bundle = self.open.get(found[0]) if found is not None else None
        if bundle is not None and found is not None and found[1] in bundle.outside:
            bundle.outside[found[1]] = result

    def step(self) -> list[str]:
        """Write the bundles that are complete or out of time; the hung members whose
        capture is over (their kill may go now)."""
        self.spies.tick()
        now, free = self.now(), []
        for key, bundle in list(self.open.items()):
            if self._complete(bundle) or now - bundle.started >= self.wait:
                del self.open[key]
                self._write(bundle)
                self.written[key] = bundle
                while len(self.written) > KEEP_WRITTEN:  # a fault never closed: let go
                    del self.written[next(iter(self.written))]
                if bundle.hung is not None and not any(
                        b.hung == bundle.hung for b in self.open.values()):
                    free.append(bundle.hung)
        return free

    def earliest(self) -> float | None:
        """When the next open bundle, or capture, runs out of time."""
        return min((b.started + self.wait for b in self.open.values()),
                   default=self.spies.earliest())

    def _complete(self, bundle: Bundle) -> bool:
        """Every member told what it can: its library answered (or cannot be asked,
        or its process is gone), or it is unresponsive and py-spy read it from
        outside (its library's thread is not running: waiting for it only delays the
        kill)."""
        if any(result is None for result in bundle.outside.values()):
            return False
        procs = self.job().procs
        for name, member in bundle.ask.members.items():
            rec = procs.get(name)
            if member.reason is not None or member.told is not None or rec is None \
                    or rec.pid != member.pid:
                continue
            read = (bundle.outside.get(name) or {}).get("threads")
            if not (read and rec.state in (P.UNRESPONSIVE, P.HUNG)):
                return False
        return True

    def fault(self, record: dict) -> None:
        """A fault closed (faults.py): its record goes beside its bundle."""
        bundle = self.written.pop((str(record.get("world")), int(record.get("generation", -1))),
                                  None)
        if bundle is not None and bundle.written is not None:
            _write_json(bundle.written / "fault.json", record)

    def close(self) -> None:
        """The run ends: what is open is written as it stands."""
        self.spies.close()
        for key, bundle in list(self.open.items()):
            del self.open[key]
            self._write(bundle)

    # -- the bundle on disk ---------------------------------------------------------------

    def _write(self, bundle: Bundle) -> None:
        self.stacks.done(bundle.ask)
        for name in bundle.ask.members:  # answers that never came are dropped
            self.keys.pop(f"{bundle.name}/{name}", None)
        members = [self._member(bundle, name) for name in bundle.ask.members]
        seen = [_seen(bundle.world, m) for m in members]
        line = culprit.line(bundle.world, bundle.generation, seen, bundle.hung, bundle.why)
        took = round(self.now() - bundle.started, 3)
        folder = self.folder / bundle.name
        doc = {"world": bundle.world, "generation": bundle.generation, "hung": bundle.hung,
               "why": bundle.why, "broke": bundle.broke, "declared_at": round(bundle.at, 4),
               "took_s": took, "culprit": line, "members": members}
        try:
            (folder / "logs").mkdir(parents=True, exist_ok=True)
            _write_json(folder / "bundle.json", doc)
            (folder / "stacks.txt").write_text(f"{line}\n\n{render(members)}")
            for name in bundle.ask.members:
                (folder / "logs" / log_name(name)).write_text(self._tail(name))
        except OSError:
            return  # a full disk must not stop the supervisor
        bundle.written = folder
        self.latest[bundle.world] = {"path": str(folder), "culprit": line,
                                     "generation": bundle.generation}
        self.changes += 1
        self.record({"event": E.POSTMORTEM, "world": bundle.world,
                     "generation": bundle.generation, "hung": bundle.hung,
                     "path": str(folder), "culprit": line, "took_s": took})

    def _member(self, bundle: Bundle, name: str) -> dict:
        """One member as ``stacks.txt`` shows it: its threads from outside where py-spy
        read them (with each thread's world call from its library, matched by thread
        id), else its library's; and both answers as they came."""
        member = bundle.ask.members[name].fields()
        inside = bundle.ask.members[name].told
        outside = bundle.outside.get(name)
        calls = {t.get("id"): t.get("call") for t in (inside or {}).get("threads", [])}
        reasons = [r for r in (member.get("reason"), bundle.outside_why.get(name)) if r]
        if inside is None and not member.get("reason"):
            reasons.insert(0, "its library did not answer (its thread could not run: the"
                              " process stopped, or a thread holding the GIL)")
        if outside is not None and outside.get("error"):
            reasons.append(outside["error"])
        elif outside is None and name in bundle.outside:
            reasons.append("py-spy's reading did not come in time")
        shown = {**member, "by": "library" if inside is not None else None,
                 "inside": inside, "outside": outside, "reasons": reasons}
        if outside is not None and outside.get("threads"):
            shown.update(answered=True, by=outside.get("by"), error=None,
                         threads=[{**t, "call": calls.get(t["id"])} for t in outside["threads"]])
        if not shown.get("answered"):
            shown["reason"] = "; ".join(reasons) or "nothing could be read"
        return shown

    def _tail(self, name: str) -> str:
        try:
            with open(self.logs / log_name(name), "rb") as log:
                log.seek(max(os.fstat(log.fileno()).st_size - LOG_TAIL, 0))
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-LOG_LINES:]) + "\n"


def _seen(world: str, member: dict) -> culprit.Seen:
    threads = member.get("threads") or []
    call, for_s = culprit.call_in(threads, world)
    if call is None and member.get("inside") is None:
        call = culprit.call_in_frames(threads)  # from outside only: the frames say it
    return culprit.Seen(member["process"], call, for_s, bool(member.get("answered")),
                        None if member.get("answered") else member.get("reason"),
                        str(member.get("state")))


def _write_json(path: Path, doc: dict) -> None:
    with contextlib.suppress(OSError):
        path.write_text(json.dumps(doc, indent=1) + "\n")
