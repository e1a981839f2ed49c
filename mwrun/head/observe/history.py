"""A run's history: its events and per-world rates over time, in the run folder.

``history.jsonl`` holds one JSON object per line, each with ``t`` (wall clock):

- ``{"event": "start", "run_id", "name", "worlds": {world: [members]}}`` first (and again
  at the head of each rotated file, so any file alone says what the lanes are);
- ``{"event": E, ...}`` for each thing that happened: ``spawn`` (process, pid,
  restarts; a restart when restarts > 0), ``signal`` (process, signal, ``why``: drill,
  hang or stop), ``hang`` (process, why), ``exit`` (process, pid, code, state, why),
  ``break`` (world, generation, reason), ``form`` (world, generation; a re-form when
  generation > 0), ``close`` (world, reason), ``stop``, ``end`` (state);
- ``{"event": "fault", "id", "world", "generation", "process", "signal", "cause",
  "breaks", "phases": {phase: time | null}, "moved": {phase: seconds}}`` once per
  fault of a world (faults.py: one outage, from a drill's or a hang's signal or the
  break until the world's first call after it re-formed), written when it is closed
  (that first call, or a new fault after the re-form, the world closed, or the run
  ended): ``id`` the fault's number in the run, ``generation`` the one that broke
  first, ``breaks`` how many breaks of the world it took, ``process`` the member at
  fault (null when a member saw the break first), ``signal`` the signal sent to it (a
  drill's, a hang's) or that ended it (null: none), ``cause`` the first break's
  reason; ``phases`` in ``schema.Phase``'s order (t_fault, exit_seen, survivors_told,
  restarted, reformed, first_call), each a wall-clock time on the head's clock (a
  remote host's corrected by its measured offset), null when that phase did not
  happen (see faults.py); ``moved``: each phase told before its cause (another
  clock's error) and put at its cause's time, by how much. Every event that belongs
  to a fault carries its id from the moment the fault started, before its ``fault``
  record is written: ``fault`` (the id) on a world's ``break``, ``form`` (the re-form
  that ended it) and ``close``; ``faults`` ({world: id}) on a process's ``signal``,
  ``exit`` and ``spawn``. Readers join on the id;
- ``{"rates": {world: [calls_per_s, bytes_per_s]}, "calls": {world: [calls, t]}}``
  every SAMPLE_EVERY seconds while the run lives: each world's rate over about the
  last beat interval (for the eye), and its completed calls since the run started as
  of head wall time t (for pace over exact windows; see traffic.py ``totals``);
- ``{"event": "drill", ...}``: a ``mwrun drill``'s summary, sent by the command line
  when the drill ends (see mwrun/cli/drill.py);
- a membership that changes (elastic jobs): ``add`` (world, members: a world made for a
  new replica), ``resize`` (world, generation, members: it re-forms with them),
  ``drain`` (world, generation, seconds), ``remove`` (world, reason: it closed for good
  and left the job); and one ``scale`` record per replica a scale operation added or
  retired: ``{"event": "scale", "op", "process", "change": "add"|"remove", "outcome":
  "done"|"failed"|"cancelled", "error", "phases": {phase: time | null}}`` in
  ``schema.ScalePhase``'s order, written once its change ended (scaleops.py).

Its size is bounded: past HISTORY_BYTES the file becomes ``history.1.jsonl`` (the one
before that is dropped) and a fresh file starts, so a run keeps its most recent two.
The history subscribes to the supervisor's events (events.py): one record per event
that has one, written when it is emitted (so ``t`` is when it happened).
The names (files, record kinds, states) are ``mwrun.schema``'s: ``mwrun report``
reads them back with the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from mwrun.head.decide import events as ev
from mwrun.records import Tally
from mwrun.schema import CALLS, HISTORY, HISTORY_ROTATED, RATES, WAITS
from mwrun.schema import Event as E
from mwrun.schema import ProcessState as P

HISTORY_BYTES = 4 * 2**20
SAMPLE_EVERY = 1.0


class History:
    def __init__(self, run_dir: Path, head: dict, clock=time.time, limit: int = HISTORY_BYTES,
                 tags: Callable[[ev.Event], dict] | None = None):
        self.path = Path(run_dir) / HISTORY
        self.rotated = Path(run_dir) / HISTORY_ROTATED
        self.head = head  # the start record: run_id, name, worlds
        self.clock = clock
        self.limit = limit
        # The fault timeline's tag of each event (faults.py ``tags``: the id of the
        # fault it belongs to), which every reader joins on; set once both exist.
        self.tags = tags
        self.bundles = 0  # post-mortem bundles written (the metrics' count)
        # Kept for the run; None once closed, or once writing failed (a full disk must
        # not stop the supervisor).
        self.file: TextIO | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._write({"event": E.START, **head})

    def _write(self, record: dict) -> None:
        file = self.file
        if file is None:
            return
        line = json.dumps({"t": round(self.clock(), 4), **record}) + "\n"
        try:
            if file.tell() + len(line) > self.limit:
                file = self._rotate(file)
            file.write(line)
            file.flush()  # a live run's report reads it
        except (OSError, ValueError):
            self.file = None  # a full disk must not stop the supervisor

    def _rotate(self, old: TextIO) -> TextIO:
        """The new file, kept as ``self.file`` once open, its first line written."""
        old.close()
        os.replace(self.path, self.rotated)
        new = self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        new.write(json.dumps({"t": round(self.clock(), 4), "event": E.START,
                              "continued": True, **self.head}) + "\n")
        return new

    def __call__(self, event: ev.Event) -> None:
        """A subscriber of the supervisor's events: the record of one, if it has one."""
        found = record(event)
        if found is not None:
            self._write({**found, **(self.tags(event) if self.tags else {})})

    def fault(self, record: dict) -> None:
        """One fault of a world, phase by phase, once it is closed (faults.py)."""
        self._write(record)

    def sample(self, rates: dict[str, list], calls: dict[str, list] | None = None,
               waits: dict[str, dict[str, float]] | None = None) -> None:
        self._write({RATES: rates, **({CALLS: calls} if calls else {}),
                     **({WAITS: waits} if waits else {})})

    def scale(self, record: dict) -> None:
        """One replica's change by a scale operation, phase by phase (scaleops.py)."""
        self._write(record)

    def postmortem(self, record: dict) -> None:
        """A post-mortem bundle written: its world, generation, path, culprit line."""
        self.bundles += 1
        self._write(record)

    def slow(self, record: dict) -> None:
        """A world's slow member named, or none any more (slowwatch.py)."""
        self._write(record)

    def drill(self, summary: dict) -> None:
        """A drill's summary (the command line's, checked by head/requests.py)."""
        self._write({"event": E.DRILL, **summary})

    def close(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None


class Counted:
    """A subscriber of the supervisor's events that counts each one's history record
    into ``tally`` (mwrun.records.Tally): the finish line's restarts and world breaks,
    counted by ``report``'s own function over the same records, whatever left the job
    since (a retired replica, a removed world), and whether or not the file took them."""

    def __init__(self, tally: Tally):
        self.tally = tally

    def __call__(self, event: ev.Event) -> None:
        found = record(event)
        if found is not None:
            self.tally.add(found)


def record(event: ev.Event) -> dict | None:
    """The history record of an event; None for those it keeps none of (lines said,
    live state moves such as unresponsive, and exits of processes that never started:
    they had no pid)."""
    match event:
        case ev.Spawned(process, pid, restarts):
            return {"event": E.SPAWN, "process": process, "pid": pid, "restarts": restarts}
        case ev.Signalled(process, sig, why):
            return {"event": E.SIGNAL, "process": process, "signal": sig.name,
                    "why": why.value}
        case ev.MadeLate(process, world, delay, hold):
            return {"event": E.LATE, "process": process, "world": world, "delay_s": delay,
                    "for_s": hold}
        case ev.Hung(process, why):
            return {"event": E.HANG, "process": process, "why": why}
        case ev.Exited(process, pid, code, state, why) if pid is not None:
            return {"event": E.EXIT, "process": process, "pid": pid, "code": code,
                    "state": state.value, "why": why}
        case ev.Abandoned(process, pid, why):  # given up as failed: its last word
            return {"event": E.EXIT, "process": process, "pid": pid, "code": None,
                    "state": P.FAILED.value, "why": why}
        case ev.WorldBroken(world, generation, reason):
            return {"event": E.BREAK, "world": world, "generation": generation,
                    "reason": reason}
        case ev.WorldFormed(world, generation):
            return {"event": E.FORM, "world": world, "generation": generation}
        case ev.WorldClosed(world, reason):
            return {"event": E.CLOSE, "world": world, "reason": reason}
        case ev.WorldAdded(world, members):
            return {"event": E.ADD, "world": world, "members": list(members)}
        case ev.WorldResized(world, generation, members):
            return {"event": E.RESIZE, "world": world, "generation": generation,
                    "members": list(members)}
        case ev.WorldDraining(world, generation, seconds):
            return {"event": E.DRAIN, "world": world, "generation": generation,
                    "seconds": seconds}
        case ev.WorldRemoved(world, reason):
            return {"event": E.REMOVE, "world": world, "reason": reason}
        case ev.Stopping():
            return {"event": E.STOP}
        case ev.RunEnded(state):
            return {"event": E.END, "state": state.value}
    return None
