"""A run's history: its events and per-world rates over time, in the run folder.

``history.jsonl`` holds one JSON object per line, each with ``t`` (wall clock):

- ``{"event": "start", "run_id", "name", "worlds": {world: [members]}}`` first (and again
  at the head of each rotated file, so any file alone says what the lanes are);
- ``{"event": E, ...}`` for each thing that happened: ``spawn`` (process, pid,
  restarts; a restart when restarts > 0), ``signal`` (process, signal, ``why``: drill,
  hang or stop), ``hang`` (process, why), ``exit`` (process, code, state, why),
  ``break`` (world, generation, reason), ``form`` (world, generation; a re-form when
  generation > 0), ``close`` (world, reason), ``stop`` (reason), ``end`` (state);
- ``{"rates": {world: [calls_per_s, bytes_per_s]}}`` every SAMPLE_EVERY seconds while
  the run lives (each the world's rate over about the last beat interval).

Its size is bounded: past HISTORY_BYTES the file becomes ``history.1.jsonl`` (the one
before that is dropped) and a fresh file starts, so a run keeps its most recent two.
The names (files, record kinds, states) are ``mwrun.schema``'s: ``mwrun report``
reads them back with the same.
Events are found by comparing the supervisor's states after each step, so the
supervisor's decisions carry no bookkeeping.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

from mwrun.schema import HISTORY, HISTORY_ROTATED, RATES
from mwrun.schema import Event as E
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W

HISTORY_BYTES = 4 * 2**20
SAMPLE_EVERY = 1.0


class History:
    def __init__(self, run_dir: Path, head: dict, clock=time.time, limit: int = HISTORY_BYTES):
        self.path = Path(run_dir) / HISTORY
        self.rotated = Path(run_dir) / HISTORY_ROTATED
        self.head = head  # the start record: run_id, name, worlds
        self.clock = clock
        self.limit = limit
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept for the run
        self.seen: dict | None = None
        self._write({"event": E.START, **head})

    def _write(self, record: dict) -> None:
        if self.file is None:
            return
        line = json.dumps({"t": round(self.clock(), 4), **record}) + "\n"
        try:
            if self.file.tell() + len(line) > self.limit:
                self._rotate()
            self.file.write(line)
            self.file.flush()  # a live run's report reads it
        except (OSError, ValueError):
            self.file = None  # a full disk must not stop the supervisor

    def _rotate(self) -> None:
        self.file.close()
        os.replace(self.path, self.rotated)
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self.file.write(json.dumps({"t": round(self.clock(), 4), "event": E.START,
                                    "continued": True, **self.head}) + "\n")

    def event(self, kind: str, **fields) -> None:
        self._write({"event": kind, **fields})

    def sample(self, rates: dict[str, list]) -> None:
        self._write({RATES: rates})

    def signalled(self, process: str, sig: int, why: str) -> None:
        self.event(E.SIGNAL, process=process, signal=signal.Signals(sig).name, why=why)

    def observe(self, sup) -> None:
        """Write what changed in the supervisor's states since the last look."""
        now = snapshot(sup)
        if now == self.seen:
            return
        before, self.seen = self.seen, now
        for record in changes(before, now, sup):
            self._write(record)

    def close(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None


def snapshot(sup) -> dict:
    return {"run": sup.state,
            "procs": {n: (r.state, r.pid, r.restarts) for n, r in sup.procs.items()},
            "worlds": {n: (w.state, w.generation, w.breaks) for n, w in sup.worlds.items()}}


def changes(before: dict | None, now: dict, sup) -> list[dict]:
    """The events between two snapshots, in the order they happen: hangs and exits,
    then breaks, then stops, spawns, forms and closes."""
    if before is None:
        before = {"run": R.STARTING, "procs": {n: (None, None, 0) for n in now["procs"]},
                  "worlds": {n: (W.FORMING, 0, 0) for n in now["worlds"]}}
    out = []
    for name, (state, pid, _) in now["procs"].items():
        old_state, old_pid, _ = before["procs"][name]
        rec = sup.procs[name]
        if state is P.HUNG and old_state is not P.HUNG:
            out.append({"event": E.HANG, "process": name, "why": rec.hung})
        # An exit is a pid gone or replaced; a live state change (unresponsive, hung)
        # is none.
        if old_pid is not None and (pid != old_pid or not state.alive):
            out.append({"event": E.EXIT, "process": name, "pid": old_pid,
                        "code": rec.exit_code, "state": state.value, "why": rec.why})
    for name, (_, _, breaks) in now["worlds"].items():
        _, old_generation, old_breaks = before["worlds"][name]
        if breaks > old_breaks:
            out.append({"event": E.BREAK, "world": name, "generation": old_generation,
                        "reason": sup.worlds[name].reason})
    if now["run"] is R.STOPPING and before["run"] is not R.STOPPING:
        out.append({"event": E.STOP})
    for name, (_, pid, restarts) in now["procs"].items():
        if pid is not None and pid != before["procs"][name][1]:
            out.append({"event": E.SPAWN, "process": name, "pid": pid, "restarts": restarts})
    for name, (state, generation, _) in now["worlds"].items():
        old_state, old_generation, _ = before["worlds"][name]
        if state is W.HEALTHY and (old_state is not W.HEALTHY or generation != old_generation):
            out.append({"event": E.FORM, "world": name, "generation": generation})
        elif state is W.CLOSED and old_state is not W.CLOSED:
            out.append({"event": E.CLOSE, "world": name, "reason": sup.worlds[name].reason})
    if now["run"].final and before["run"] is not now["run"]:
        out.append({"event": E.END, "state": now["run"].value})
    return out
