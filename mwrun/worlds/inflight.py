"""Which world call each thread is in, and since when: what a stacks dump says beside
the frames (the frames show torch's wait, not which world or call it serves).

A plain dict keyed by thread id, written around each call (calls.py, work.py) and read
by the supervisor link's thread when the head asks for stacks (stacks.py). One item
set and one popped per call: no lock (the GIL makes each one whole), no allocation
past the tuple, so a call costs what it did (measured: well under a microsecond of
a send's tens).
"""

from __future__ import annotations

CALLS: dict[int, tuple[str, str, float]] = {}  # thread id -> (world, call, monotonic start)


def busy(world: str) -> bool:
    """Whether a thread of this process is in a call on ``world`` now."""
    return any(call[0] == world for call in list(CALLS.values()))
