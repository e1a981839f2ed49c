"""Post-mortem bundles: why a world hung or broke, captured while the evidence lives.

A subscriber of the supervisor's events. When a member is declared hung (``Hung``),
each of its worlds gets a bundle and every member of that world is captured at once:
its library is asked for its threads' stacks and the world call each is in (stacks.py,
the same ask as ``mwrun stacks``), and py-spy reads each member from outside, run by
its host's agent (host/spy.py: it answers for a stopped member, or one holding the GIL). The
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
record, which ``report`` and ``status`` show. The run keeps each world's first and
latest bundle and a bounded number of the others (shelf.py).
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from mwrun.head.decide import events as ev
from mwrun.head.decide.records import ProcessRecord, WorldRecord
from mwrun.head.postmortem import bundles
from mwrun.head.postmortem.bundles import Bundle
from mwrun.head.postmortem.shelf import Shelf
from mwrun.head.postmortem.stacks import Stacks
from mwrun.schema import LOGS, POSTMORTEM
from mwrun.schema import Event as E
from mwrun.schema import ProcessState as P

CAPTURE_WAIT = 2.0  # seconds a bundle waits for its members' answers, at most
OUTSIDE_AFTER = 0.5  # a break's member is read from outside if its library is this slow
ENV = "MWRUN_POSTMORTEM"  # "off" in mwrun launch's environment: no bundles, no capture wait
KEEP_WRITTEN = 256  # bundles kept until their fault's record comes


class Hosts(Protocol):
    """The members' hosts (the router): their agents' capture (host/spy.py)."""

    def capture(self, name: str, key: str, pid: int, native: bool, within: float) -> str | None: ...


class Watched(Protocol):
    """What a bundle reads of the job (the supervisor): its processes and worlds."""

    procs: dict[str, ProcessRecord]
    worlds: dict[str, WorldRecord]


class Postmortems:
    def __init__(self, run_dir: Path, stacks: Stacks, job: Callable[[], Watched],
                 hosts: Callable[[], Hosts],
                 record: Callable[[dict], None], now: Callable[[], float],
                 wall: Callable[[], float], wait: float = CAPTURE_WAIT,
                 env: Mapping[str, str] = os.environ):
        self.folder = run_dir / POSTMORTEM
        self.shelf = Shelf(self.folder)  # how many bundles the run keeps
        self.logs = run_dir / LOGS
        self.stacks, self.job = stacks, job
        self.hosts, self.record = hosts, record
        self.now, self.wall = now, wall
        self.wait = 0.0 if env.get(ENV) == "off" else wait  # the supervisor's capture wait
        self.open: dict[tuple[str, int], Bundle] = {}
        self.keys: dict[str, tuple[tuple[str, int], str]] = {}  # a capture's key -> whose
        self.written: dict[tuple[str, int], Bundle] = {}  # kept for the fault record
        self.latest: dict[str, dict] = {}  # world -> its last bundle (status shows it)
        self.changes = 0  # state.json compares this
        self.unheld: list[str] = []  # hung members with no bundle: their kill goes at once

    # -- what starts a bundle -----------------------------------------------------------

    def __call__(self, event: ev.Event) -> None:
        if not self.wait:
            return  # turned off
        match event:
            case ev.Hung(process, why):
                job = self.job()
                rec = job.procs.get(process)
                worlds = [w for w in (rec.plan.worlds if rec is not None else ())
                          if w in job.worlds]
                began = [self._begin(w, job.worlds[w].generation, process, why)
                         for w in worlds]
                if not any(began):  # no world to capture: its kill need not wait
                    self.unheld.append(process)
            case ev.WorldAdded(world) | ev.WorldRemoved(world):  # a world of that name anew
                for key in [k for k in self.written if k[0] == world]:
                    del self.written[key]
            case ev.WorldBroken(world, generation, reason):
                bundle = self.open.get((world, generation)) or \
                    self.written.get((world, generation))
                if bundle is not None:
                    bundle.broke = bundle.broke or reason
                elif world in self.job().worlds:
                    self._begin(world, generation, None, reason)

    def _begin(self, world: str, generation: int, hung: str | None, why: str) -> bool:
        """A bundle for ``world``'s ``generation``; whether one is open for it now."""
        key = (world, generation)
        if key in self.open:  # a break's, still capturing: the hang is its culprit
            self.open[key].hung = self.open[key].hung or hung
            return True
        if key in self.written:
            return False
        job = self.job()
        members = [job.procs[m] for m in job.worlds[world].plan.members if m in job.procs]
        bundle = Bundle(world, generation, hung, why, self.wall(), self.now(),
                        self.stacks.start(members))
        self.open[key] = bundle
        for rec in members:
            name = rec.plan.name
            if rec.worker.pid is None or not rec.state.alive:
                why = rec.why or rec.state.value
                bundle.outside_why[name] = f"not running when captured: {why}"
            elif hung is None and bundle.ask.members[name].reason is None:
                bundle.later.append(name)  # its library first: the recovery goes on
            else:
                self._capture(bundle, rec, name == hung)
        return True

    def _capture(self, bundle: Bundle, rec: ProcessRecord, native: bool) -> None:
        """Read ``rec`` from outside, by its host's agent (host/spy.py)."""
        name, host = rec.plan.name, rec.plan.host
        key = f"{bundle.name}/{name}"
        self.keys[key] = ((bundle.world, bundle.generation), name)
        pid = typing.cast(int, rec.worker.pid)
        missing = self.hosts().capture(name, key, pid, native, self.wait)
        missing = None if missing is None else f"on host {host}: {missing}"
        if missing is None:
            bundle.outside[name] = None
        else:
            bundle.outside_why[name] = missing

    # -- what comes back ----------------------------------------------------------------

    def outside_told(self, key: object, pid: object, result: dict) -> None:
        """py-spy's answer for one member, from its host's agent (a CAPTURED frame)."""
        found = self.keys.pop(str(key), None)
        bundle = self.open.get(found[0]) if found is not None else None
        if bundle is not None and found is not None and found[1] in bundle.outside:
            bundle.outside[found[1]] = result

    def step(self) -> list[str]:
        """Write the bundles that are complete or out of time; the hung members whose
        capture is over (their kill may go now)."""
        now, free = self.now(), self.unheld
        self.unheld = []
        for bundle in self.open.values():
            self._read_later(bundle, now)
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

    def _read_later(self, bundle: Bundle, now: float) -> None:
        """A break's members whose library answered need no outside reading; the
        others get one once OUTSIDE_AFTER has passed."""
        told = bundle.ask.members
        bundle.later = [n for n in bundle.later if told[n].told is None]
        if bundle.later and now - bundle.started >= OUTSIDE_AFTER:
            procs = self.job().procs
            for name in bundle.later:
                rec = procs.get(name)
                if rec is not None and rec.worker.pid == told[name].pid:
                    self._capture(bundle, rec, False)
            bundle.later = []

    def earliest(self) -> float | None:
        """When the next open bundle, or capture, runs out of time."""
        times = [b.started + (OUTSIDE_AFTER if b.later else self.wait)
                 for b in self.open.values()]
        return min(times, default=None)

    def _complete(self, bundle: Bundle) -> bool:
        """Every member told what it can: its library answered (or cannot be asked,
        or its process is gone), or it is unresponsive and py-spy read it from
        outside (its library's thread is not running: waiting for it only delays the
        kill)."""
        if bundle.later or any(result is None for result in bundle.outside.values()):
            return False
        procs = self.job().procs
        for name, member in bundle.ask.members.items():
            rec = procs.get(name)
            if member.reason is not None or member.told is not None or rec is None \
                    or rec.worker.pid != member.pid:
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
            bundles.write_json(bundle.written / "fault.json", record)

    def close(self) -> None:
        """The run ends: what is open is written as it stands."""
        for key, bundle in list(self.open.items()):
            del self.open[key]
            self._write(bundle)

    # -- the bundle on disk ---------------------------------------------------------------

    def _write(self, bundle: Bundle) -> None:
        self.stacks.done(bundle.ask)
        for name in bundle.ask.members:  # answers that never came are dropped
            self.keys.pop(f"{bundle.name}/{name}", None)
        folder, took = self.folder / bundle.name, round(self.now() - bundle.started, 3)
        for n in range(2, 1000):  # a world made again under its name: its own folder
            if not folder.exists():
                break
            folder = self.folder / f"{bundle.name}-{n}"
        try:
            line = bundles.write(folder, self.logs, bundle, took)
        except OSError:
            return  # a full disk must not stop the supervisor
        bundle.written = folder
        self.shelf.add(bundle.world, folder)
        self.latest[bundle.world] = {"path": str(folder), "culprit": line,
                                     "generation": bundle.generation}
        self.changes += 1
        self.record({"event": E.POSTMORTEM, "world": bundle.world,
                     "generation": bundle.generation, "hung": bundle.hung,
                     "path": str(folder), "culprit": line, "took_s": took})
