"""How many restarts and world breaks a run had: one count over the history's records,
for every place that says it. The head folds each record as it writes it (its finish
line after ``mwrun stop``), ``report`` the records it reads back: the same facts, the
same function, so the two never disagree (the head once counted what its live records
held, and a retired replica's restart, or a removed world's break, left with them).
Pure: records in, numbers out."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mwrun.schema import Event as E


@dataclass
class Tally:
    restarts: int = 0  # spawns of a process that ran before (any reason, any process)
    breaks: int = 0  # world breaks (any world, removed ones included)
    bundles: int = 0  # post-mortem bundles written

    def add(self, record: dict) -> None:
        """One history record (mwrun/head/observe/history.py's ``record``)."""
        kind = record.get("event")
        if kind == E.SPAWN and (record.get("restarts") or 0) > 0:
            self.restarts += 1
        elif kind == E.BREAK:
            self.breaks += 1
        elif kind == E.POSTMORTEM:
            self.bundles += 1


def tally(records: Iterable[dict]) -> Tally:
    counted = Tally()
    for record in records:
        counted.add(record)
    return counted
