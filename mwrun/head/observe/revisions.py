"""The plan's revisions kept in the run folder (``revisions.jsonl``), bounded as the
history is: past REVISIONS_BYTES the file becomes ``revisions.1.jsonl`` (the one
before that is dropped) and a fresh file starts with a ``summary`` record, every
revision before it summed up. The newest file alone therefore says what the plan is
now (for a head that takes over, for ``mwrun status``), and the two together hold the
most recent revisions one by one. A revision is about 2 KiB (one worker added to
configs/serve.yaml, with the whole plans it keeps: replay.py): the cap holds hundreds;
without it an autoscaler's run grew its file for ever.

A summary is a revision record (membership/revision.py ``Revision.record``) with
``summary: true``: ``revision`` and ``op`` the last revision it covers, ``replicas``
each scaled process's replicas as they are, ``started`` the plan of each process a
revision started that no later one retired, ``retired`` each launched process
a revision retired that no later one started again (one a revision started is simply
left out once retired), ``worlds`` the last action of each world a
revision touched (a world removed stays so, unless formed again) and ``plans`` the
whole plan of each process and world in ``started`` and ``worlds`` as it is. Laid over
the launch plan like any record (``mwrun.runs.plan_now``; a new head:
membership/replay.py), it gives the plan as it is. Names are reused (a replica's index
is the lowest free), so what it holds is bounded by the job's size, never by its age.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Collection
from pathlib import Path

from mwrun import runs
from mwrun.membership.revision import Action
from mwrun.schema import PLAN, REVISIONS, REVISIONS_ROTATED

REVISIONS_BYTES = 2**20


def summed(summary: dict | None, record: dict, launched: Collection[str] = ()) -> dict:
    """``summary`` (None: nothing yet) with one more revision record laid over it;
    ``launched``: the launch plan's processes (the only retired ones it must name)."""
    base = summary or {"replicas": {}, "started": {}, "retired": [], "worlds": {},
                       "plans": {"processes": {}, "worlds": {}}}
    retired, told = set(record["retired"]), record["worlds"]
    started = {n: p for n, p in base["started"].items() if n not in retired}
    started.update(record["started"])
    return {"revision": record["revision"], "op": record["op"], "summary": True,
            "replicas": {**base["replicas"], **record["replicas"]}, "started": started,
            "retired": sorted((set(base.get("retired") or ()) | retired & set(launched))
                              - set(record["started"])),
            "worlds": {**base["worlds"], **told},
            "plans": _plans(base.get("plans"), record.get("plans"), retired, told)}


def _plans(base: dict | None, plans: dict | None, retired: set[str], told: dict
           ) -> dict | None:
    """The whole plans of a summary with one more record's laid over them; None once a
    record without them (an mwrun from before they were kept) was summed."""
    if base is None or plans is None:
        return None
    processes = {n: p for n, p in base["processes"].items() if n not in retired}
    processes.update(plans["processes"])
    worlds = {w: p for w, p in base["worlds"].items()
              if told.get(w, {}).get("action") != Action.REMOVE.value}
    worlds.update(plans["worlds"])
    return {"processes": processes, "worlds": worlds}


class RevisionLog:
    def __init__(self, run_dir: Path, limit: int = REVISIONS_BYTES):
        self.path = Path(run_dir) / REVISIONS
        self.rotated = Path(run_dir) / REVISIONS_ROTATED
        self.limit = limit
        self.launched: set[str] = set()  # the launch plan's processes
        with contextlib.suppress(OSError, ValueError, TypeError):
            self.launched = set(json.loads((Path(run_dir) / PLAN).read_text())["processes"])
        # What the folder holds already (a head that takes over a run), summed up.
        self.summary: dict | None = None
        for record in runs.revisions_in(Path(run_dir)):
            self.summary = record if record.get("summary") else \
                summed(self.summary, record, self.launched)

    def keep(self, record: dict) -> None:
        """One revision, as the last line of the file (a full disk must not stop the
        job: the line is then lost, and said nowhere but here)."""
        line = json.dumps(record) + "\n"
        try:
            size = self.path.stat().st_size if self.path.exists() else 0
            if size and self.summary is not None and size + len(line) > self.limit:
                os.replace(self.path, self.rotated)
                line = json.dumps(self.summary) + "\n" + line
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(line)
        except OSError:
            pass
        self.summary = summed(self.summary, record, self.launched)
