"""The plan's revisions kept in the run folder (``revisions.jsonl``), bounded as the
history is: past REVISIONS_BYTES the file becomes ``revisions.1.jsonl`` (the one
before that is dropped) and a fresh file starts with a ``summary`` record, every
revision before it summed up. The newest file alone therefore says what the plan is
now (for a head that takes over, for ``mwrun status``), and the two together hold the
most recent revisions one by one. A revision is about 340 bytes: the cap holds
thousands; without it an autoscaler's run grew its file for ever.

A summary is a revision record (membership/revision.py ``Revision.record``) with
``summary: true``: ``revision`` and ``op`` the last revision it covers, ``replicas``
each scaled process's replicas as they are, ``started`` the plan of each process a
revision started that no later one retired, ``retired`` empty (those gone are
dropped) and ``worlds`` the last action of each world still in the job. Laid over the
launch plan like any record (``mwrun.runs.plan_now``), it gives the plan as it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mwrun import runs
from mwrun.membership.revision import Action
from mwrun.schema import REVISIONS, REVISIONS_ROTATED

REVISIONS_BYTES = 2**20


def summed(summary: dict | None, record: dict) -> dict:
    """``summary`` (None: nothing yet) with one more revision record laid over it."""
    base = summary or {"replicas": {}, "started": {}, "worlds": {}}
    started = {n: p for n, p in base["started"].items() if n not in record["retired"]}
    started.update(record["started"])
    worlds = {**base["worlds"], **record["worlds"]}
    return {"revision": record["revision"], "op": record["op"], "summary": True,
            "replicas": {**base["replicas"], **record["replicas"]}, "started": started,
            "retired": [], "worlds": {w: a for w, a in worlds.items()
                                      if a.get("action") != Action.REMOVE.value}}


class RevisionLog:
    def __init__(self, run_dir: Path, limit: int = REVISIONS_BYTES):
        self.path = Path(run_dir) / REVISIONS
        self.rotated = Path(run_dir) / REVISIONS_ROTATED
        self.limit = limit
        # What the folder holds already (a head that takes over a run), summed up.
        self.summary: dict | None = None
        for record in runs.revisions_in(Path(run_dir)):
            self.summary = record if record.get("summary") else summed(self.summary, record)

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
        self.summary = summed(self.summary, record)
