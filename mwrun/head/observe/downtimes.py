"""Each world's faults' downtimes, counted as each fault record closes: what the metrics
show as a histogram (observe/metrics.py), kept by every head whether or not it serves
metrics (a job that serves none must not import prometheus_client to start: 20-40 ms
of every launch)."""

from __future__ import annotations

from mwrun.schema import Phase

# A fault's downtime buckets (seconds): a warm re-form is tens of milliseconds, a cold
# one seconds, a hung peer's the world's timeout and more.
BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Downtimes:
    """Per world, a histogram of its faults' downtimes (from the fault's first known
    phase to its first call after the re-form, or the re-form), counted as each fault
    record closes (observe/faults.py). Bounded: a bucket count per world."""

    def __init__(self):
        self.worlds: dict[str, tuple[list[int], float]] = {}  # counts per bucket, sum

    def fault(self, record: dict) -> None:
        down = downtime(record)
        if down is None:
            return
        counts, total = self.worlds.get(record["world"], ([0] * (len(BUCKETS) + 1), 0.0))
        index = next((i for i, le in enumerate(BUCKETS) if down <= le), len(BUCKETS))
        counts[index] += 1
        self.worlds[record["world"]] = (counts, total + down)


def downtime(record: dict) -> float | None:
    """A fault record's downtime in seconds; None where it never came back."""
    phases = record.get("phases") or {}
    known = [t for t in phases.values() if isinstance(t, int | float)]
    start = phases.get(Phase.T_FAULT.value)
    start = start if isinstance(start, int | float) else min(known, default=None)
    back = phases.get(Phase.FIRST_CALL.value) or phases.get(Phase.REFORMED.value)
    if start is None or not isinstance(back, int | float):
        return None
    return max(back - start, 0.0)
