"""Per world and operation, how long the members' blocking calls took: the histogram the
metrics serve (``mwrun_world_call_seconds``).

Each member's heartbeat carries, per world and operation, its calls counted in the
fixed buckets of ``protocol.CALL_TIME_BOUNDS`` since it started (worlds/traffic.py).
A world's histogram is every member's added up, bucket by bucket: each member's call
is one observation of a call's time (in a collective each member waits its own time,
and the slow member's peers wait longest). A restarted member counts from zero again,
so what its earlier starts reported is carried, and a scrape never sees a count go
back; a world removed is forgotten, and one made again under its name starts afresh.
"""

from __future__ import annotations

from mwrun.protocol import CALL_TIME_BOUNDS

_WIDTH = len(CALL_TIME_BOUNDS) + 2  # the buckets, the count above them, the seconds


class CallTimes:
    def __init__(self):
        # (process, world) -> (pid, {operation: row}) as its latest beat told
        self._latest: dict[tuple[str, str], tuple[int, dict[str, list]]] = {}
        # (world, operation) -> the rows of members' earlier starts, added up
        self._carried: dict[tuple[str, str], list] = {}

    def beat(self, process: str, pid: int, times: dict[str, dict[str, list]]) -> None:
        """A heartbeat's ``times`` (checked by serve/requests.py)."""
        for world, rows in times.items():
            had = self._latest.get((process, world))
            if had is not None and had[0] != pid:  # a restart: keep what it counted
                for op, row in had[1].items():
                    self._carried[(world, op)] = _add(self._carried.get((world, op)), row)
            self._latest[(process, world)] = (pid, rows)

    def forget(self, world: str) -> None:
        """A world that left the job: its counts go with it."""
        for key in [k for k in self._latest if k[1] == world]:
            del self._latest[key]
        for key in [k for k in self._carried if k[0] == world]:
            del self._carried[key]

    def histograms(self) -> dict[tuple[str, str], tuple[list[int], float]]:
        """(world, operation) -> (count per bucket of CALL_TIME_BOUNDS and above them,
        not cumulative; seconds added up), since the run started."""
        out: dict[tuple[str, str], list] = {k: list(v) for k, v in self._carried.items()}
        for (_, world), (_, rows) in self._latest.items():
            for op, row in rows.items():
                out[(world, op)] = _add(out.get((world, op)), row)
        return {key: ([int(n) for n in row[:-1]], float(row[-1])) for key, row in out.items()}


def _add(total: list | None, row: list) -> list:
    if total is None:
        return list(row)
    return [a + b for a, b in zip(total, row, strict=True)] if len(row) == _WIDTH else total
