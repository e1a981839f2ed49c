"""Every scale operation of the run, by its id, for the life of the run: kept in the run
folder, so an id asked again (``mwrun scale --op``, a drill's) never scales twice however
many operations came between, and a new head reading the folder keeps that promise too.

On disk (``schema.OPS``): 256 files, ``ops/NN.jsonl`` where NN is the first byte of
the id's SHA-1 in hex; one line per operation each time the head writes it down (at
its start; when it ends; when its record is written), the last line of an id being
how it stood. A lookup reads one file: a 256th of the run's operations (a million
operations: some 4,000 lines, a few milliseconds). In memory the head keeps only the
recent operations and those under way (scaleops.KEEP).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable
from pathlib import Path

from mwrun.schema import OpState


class OpBook:
    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def _file(self, op: str) -> Path:
        return self.folder / f"{hashlib.sha1(op.encode()).hexdigest()[:2]}.jsonl"

    def keep(self, view: dict) -> None:
        """Write ``view`` (an operation as the op verb shows it) down."""
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
            with open(self._file(view["op"]), "a", encoding="utf-8") as out:
                out.write(json.dumps(view) + "\n")
        except OSError:
            pass  # a full disk must not stop the job; the recent ids are in memory still

    def find(self, op: str) -> dict | None:
        """The operation ``op`` as last written down, or None when it never was."""
        found = None
        quoted = json.dumps(op)  # how the id reads inside a line: most lines are skipped unparsed
        try:
            with open(self._file(op), encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    if quoted in line:
                        found = _parsed(line, op) or found
        except OSError:  # none written yet (or unreadable): not known
            return None
        return found

    def settle(self, ops: Iterable[str], running: Collection[str], why: str) -> list[dict]:
        """Of ``ops``, each that a head which died left under way (``mwrun adopt``),
        written down as ended, as the new head finds the job (``running``: the processes
        it wants that run): a replica added that runs is done, one retired that is gone
        (or that the new head retires again) is done, any other change failed, for
        ``why``. Those ops, as written."""
        settled = []
        for op in dict.fromkeys(ops):  # (once each, in order)
            view = self.find(op)
            if view is None or view.get("state") != OpState.RUNNING.value:
                continue
            changes = [_settled(c, running, why) for c in view.get("changes") or ()]
            done = all(isinstance(c, dict) and c.get("outcome") == "done" for c in changes)
            view = {**view, "state": (OpState.DONE if done else OpState.FAILED).value,
                    "changes": changes}
            self.keep(view)
            settled.append(view)
        return settled


def _settled(change: object, running: Collection[str], why: str) -> object:
    if not isinstance(change, dict) or change.get("outcome") is not None:
        return change
    added = change.get("change") == "add"
    if added == (change.get("process") in running):
        return {**change, "outcome": "done", "error": None}
    return {**change, "outcome": "failed", "error": why}


def _parsed(line: str, op: str) -> dict | None:
    try:
        view = json.loads(line)
    except ValueError:  # a line cut short by a full disk or a crash
        return None
    return view if isinstance(view, dict) and view.get("op") == op else None
