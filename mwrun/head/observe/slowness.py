"""The slow member of a world: the one its peers wait for.

Every member times each collective it completes, from its own call to its return
(mwrun/worlds/traffic.py), and its heartbeats carry the sum. In a collective nobody
returns before the last member has arrived, so a member that comes late to every call
waits least, and every peer waits about that much longer than it: the members' own
waits name it, with no clock shared between hosts. Over the last WAIT_WINDOW seconds of
beats (observe/traffic.py ``waits``), per member, the mean wait per collective.

Pure: waits in, the verdict out. A member is named only when the verdict is clear,
so a healthy world never shows one:

* the peer that waits *least* must still wait at least FLOOR_S more per call than it
  (scheduling on a busy host moves a member's arrival by a few milliseconds, this way
  or that, call by call: the mean over hundreds of calls cancels that out, and what
  stays under FLOOR_S is left unsaid);
* and that lag must be at least SHARE of that peer's whole wait: most of what the peers
  wait is for this member, not for the network or the operation itself (a large
  all_reduce over a slow link makes every member wait long, and nobody is slow);
* every member completed MIN_CALLS collectives in the window (a world that calls
  seldom gives no verdict rather than a guess).

Two members late together leave no single one that all others wait for: nobody is
named (each of them waits about as little as the other).
"""

from __future__ import annotations

from dataclasses import dataclass

FLOOR_S = 0.005
SHARE = 0.5
MIN_CALLS = 10


@dataclass(frozen=True)
class Slow:
    member: str
    lag_s: float  # how much longer per call its least-waiting peer waits than it
    calls: int  # collectives the verdict rests on (the fewest of any member)

    def view(self, waits: dict[str, tuple[int, float]]) -> dict:
        """What the status document shows of it."""
        return {"member": self.member, "lag_s": round(self.lag_s, 4), "calls": self.calls,
                "waits_s": {name: round(wait, 4) for name, (_, wait) in sorted(waits.items())}}


def slow(waits: dict[str, tuple[int, float]], size: int) -> Slow | None:
    """The member the others wait for, from each member's (collectives, mean wait)
    over the same window; None where there is no clear one (see above). ``size``: the
    world's members, every one of which must have told its waits."""
    if size < 2 or len(waits) < size:
        return None
    calls = min(count for count, _ in waits.values())
    if calls < MIN_CALLS:
        return None
    member = min(waits, key=lambda name: waits[name][1])
    peers = min(wait for name, (_, wait) in waits.items() if name != member)
    lag = peers - waits[member][1]
    if lag < FLOOR_S or lag < SHARE * peers:
        return None
    return Slow(member, lag, calls)
