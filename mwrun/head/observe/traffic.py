"""Per-world traffic, from the counts members report with their heartbeats.

Each member's heartbeat carries, per world, its calls, bytes and failures so far and
the age of its last completed call, stamped with its own monotonic clock (see
mwrun/worlds/supervisor_link.py). Rates are differences of those counts over the
member's own clock, so a busy supervisor reading a beat late does not skew them.

A world's rate is its busiest member's: in a send/recv pair both ends count each
message once, and in a collective every member counts each call once, so the busiest
member's count is the number of messages (or collectives) the world carried. Its
failures are every member's, added up; its last call is the most recent of any member.

For the history, ``totals`` gives each world's completed calls since the run started,
a count that never goes back: pace over a window is then a difference of two counts
over the window's exact length (not an average of rates, which smears an outage).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from mwrun.head.observe.calltimes import CallTimes

WINDOW = 5.0  # seconds of beats that status rates average over
WAIT_WINDOW = 10.0  # seconds of beats the members' waits are compared over (slowness.py)
KEEP = 64  # beats kept per member (a minute at one beat a second, ample for WINDOW)


@dataclass
class Member:
    pid: int
    # (member clock, calls, bytes, collectives timed, seconds waited in them), oldest first
    beats: deque = field(default_factory=lambda: deque(maxlen=KEEP))
    failures: int = 0
    last_age: float | None = None  # age of its last call when the last beat left it
    heard: float = 0.0  # supervisor clock when the last beat arrived

    def _span(self, span: float) -> tuple[tuple, tuple] | None:
        """(first, last) of its beats over about the last ``span`` seconds."""
        if len(self.beats) < 2:
            return None
        last = self.beats[-1]
        base = self.beats[0]
        for beat in reversed(self.beats):
            if beat[0] <= last[0] - span * 0.95:  # a beat a little early still opens it
                base = beat
                break
        return (base, last) if last[0] > base[0] else None

    def rate(self, span: float) -> tuple[float, float]:
        """(calls/s, bytes/s) over about the last ``span`` seconds of its beats."""
        found = self._span(span)
        if found is None:
            return 0.0, 0.0
        (t0, c0, b0, _, _), (t1, c1, b1, _, _) = found
        return (c1 - c0) / (t1 - t0), (b1 - b0) / (t1 - t0)

    def wait(self, span: float) -> tuple[int, float] | None:
        """(collectives, mean seconds waited in each) over about the last ``span``
        seconds of its beats; None where it completed none then."""
        if not self.beats or not self.beats[-1][3]:  # never timed one: no scan (p2p)
            return None
        found = self._span(span)
        if found is None or found[1][3] <= found[0][3]:
            return None
        first, last = found
        return last[3] - first[3], (last[4] - first[4]) / (last[3] - first[3])


class Traffic:
    def __init__(self):
        self.members: dict[tuple[str, str], Member] = {}  # (process, world) -> its counts
        self.heard: set[str] = set()  # worlds a member told the traffic of, ever
        # (process, world) -> calls and bytes its earlier incarnations reported before
        # they ended
        self.carried: dict[tuple[str, str], tuple[int, int]] = {}
        self.times = CallTimes()  # the call-time histograms the beats carry too

    def beat(self, process: str, pid: int, t: float, traffic: dict, now: float) -> None:
        """A heartbeat's counts. A new pid starts afresh: a restarted process counts
        from zero again."""
        for world, counts in traffic.items():
            calls, nbytes, failures, age, *timing = counts  # timing: a library since 39
            timed, waited = timing[:2] if len(timing) >= 2 else (0, 0.0)
            member = self.members.get((process, world))
            if member is None or member.pid != pid:
                if member is not None and member.beats:  # a restart: keep what it counted
                    calls0, bytes0 = self.carried.get((process, world), (0, 0))
                    self.carried[(process, world)] = (calls0 + member.beats[-1][1],
                                                      bytes0 + member.beats[-1][2])
                member = self.members[(process, world)] = Member(pid)
                self.heard.add(world)
            if member.beats and t <= member.beats[-1][0]:
                continue  # out of order or repeated
            member.beats.append((float(t), int(calls), int(nbytes), int(timed),
                                 float(waited)))
            member.failures, member.last_age, member.heard = int(failures), age, now

    def forget(self, world: str) -> None:
        """A world that left the job (removed): its members' counts go with it, so a
        world made again under its name counts from nothing."""
        for key in [k for k in (*self.members, *self.carried) if k[1] == world]:
            self.members.pop(key, None)
            self.carried.pop(key, None)
        self.times.forget(world)

    def totals(self, now: float, wall: float) -> dict[str, list]:
        """Per world [calls since the run started, head wall time they are as of].

        A restarted member counts from zero again, so each member's count is what its
        earlier incarnations reported plus its current one's: never going back. The
        world's count is its busiest member's (as for rates): the max of counts that
        never go back never goes back either. (Adding up each interval's largest
        increment instead would count the members' jitter: at 2 calls/s, the sender a
        call ahead in one second and the receiver in the next adds a call that never
        was.) Calls an incarnation made after its last beat are lost with it; the
        member that survived still counted them, and the max takes its count. The
        time is when the newest beat counted arrived (beats leave on the wall clock's
        beat, so a count is as of then, not as of the sample)."""
        out: dict[str, list] = {}
        for (process, world), m in self.members.items():
            count = self.carried.get((process, world), (0, 0))[0] + \
                (m.beats[-1][1] if m.beats else 0)
            heard = wall - (now - m.heard)
            if world not in out:
                out[world] = [count, heard]
            else:
                out[world] = [max(out[world][0], count), max(out[world][1], heard)]
        return {w: [c, round(t, 3)] for w, (c, t) in out.items()}

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per world (calls, bytes) since the run started, never going back: each the
        busiest member's, its earlier incarnations' counts carried (as ``totals``)."""
        out: dict[str, tuple[int, int]] = {}
        for (process, world), m in self.members.items():
            calls0, bytes0 = self.carried.get((process, world), (0, 0))
            calls, nbytes = (m.beats[-1][1], m.beats[-1][2]) if m.beats else (0, 0)
            had = out.get(world, (0, 0))
            out[world] = (max(had[0], calls0 + calls), max(had[1], bytes0 + nbytes))
        return out

    def member(self, process: str, pid: int | None, world: str) -> Member | None:
        """The live member's record, or None (never beat, or an earlier incarnation's)."""
        member = self.members.get((process, world))
        if member is None or pid is None or member.pid != pid:
            return None
        return member

    def view(self, members: dict[str, int | None], world: str, now: float,
             span: float = WINDOW) -> dict:
        """What status shows of one world: members maps process name -> its live pid."""
        found = [(name, m) for name, pid in members.items()
                 if (m := self.member(name, pid, world)) is not None]
        if not found:
            return {"calls_per_s": None, "bytes_per_s": None, "last_call_age_s": None,
                    "failures": None}
        rates = [_fresh_rate(m, now, span) for _, m in found]
        ages = [m.last_age + (now - m.heard) for _, m in found if m.last_age is not None]
        return {"calls_per_s": round(max(r[0] for r in rates), 3),
                "bytes_per_s": round(max(r[1] for r in rates), 1),
                "last_call_age_s": round(min(ages), 3) if ages else None,
                "failures": sum(m.failures for _, m in found)}

    def waits(self, members: dict[str, int | None], world: str, now: float,
              span: float = WAIT_WINDOW) -> dict[str, tuple[int, float]]:
        """Per live member of ``world`` that beat lately: (collectives, mean seconds
        waited in each) over about the last ``span`` seconds."""
        found = {}
        for name, pid in members.items():
            m = self.member(name, pid, world)
            if m is not None and now - m.heard <= span + 2.0 and \
                    (wait := m.wait(span)) is not None:
                found[name] = wait
        return found

    def per_member(self, process: str, pid: int | None, worlds, now: float) -> dict:
        """One process's own traffic per world, for its entry in the status document."""
        out = {}
        for world in worlds:
            m = self.member(process, pid, world)
            if m is not None:
                calls, nbytes = _fresh_rate(m, now, WINDOW)
                out[world] = {"calls_per_s": round(calls, 3), "bytes_per_s": round(nbytes, 1),
                              "failures": m.failures,
                              "last_call_age_s": None if m.last_age is None
                              else round(m.last_age + now - m.heard, 3)}
        return out


def _fresh_rate(member: Member, now: float, span: float) -> tuple[float, float]:
    # A member that stopped beating (stopped, wedged) carries nothing we can vouch for.
    if now - member.heard > span + 2.0:
        return 0.0, 0.0
    return member.rate(span)
