"""Hang detection that a stalled supervisor cannot fool (pure: the clock is passed in).

A heartbeat is only seen when the supervisor runs. If the supervisor itself was not
running (SIGSTOP, a debugger, a swap storm, a paused VM), every process looks silent
for that long, and judging by the wall clock would kill them all. So silence is
measured on an *awake clock*: monotonic time minus the supervisor's own stalls, which
it detects as a gap between its turns far longer than its tick (the loop takes a turn
at least every tick, whatever happens).

A process silent past its hang deadline is then only *suspect*: it is hung if /proc
says it is stopped, or if it stays silent for a fresh grace of awake time (its beats
may still sit unread in the supervisor's sockets).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mwrun.head.decide.records import Worker

# A gap between two turns of the supervisor longer than this means it was not running.
STALL = 2.0
# The shortest grace a silent (not stopped) process gets before it is declared hung.
CONFIRM_MIN = 1.0


# How often the clock samples its threads' wait for a CPU (a few /proc reads), at most.
SAMPLE_EVERY = 0.5


def cpu_wait() -> float | None:
    """Seconds the supervisor's threads have waited for a CPU while runnable (Linux's
    schedstat run_delay, summed over its threads); None where that cannot be read.

    Every Python thread counts, not only the loop's: the loop also stalls waiting for
    the GIL held by one of its own threads (the console's, a store builder's) that is
    itself waiting for a CPU, and that is starvation too. The stores' own threads (one
    or more per store, in C++, 64 to 128 at 1,000 ranks) never take the GIL, so they
    cannot stall the loop and are not read: reading them all, twice a second, was a
    fifth of an idle head's CPU.
    """
    try:
        with open("/proc/thread-self/schedstat") as stat:
            if int(stat.read().split()[0]) == 0:
                return None  # running, yet it has run 0 ns: this kernel keeps no counts
    except (OSError, ValueError, IndexError):
        return None
    tasks = [t.native_id for t in threading.enumerate() if t.native_id is not None]
    total = 0.0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[1]) / 1e9
        except FileNotFoundError:
            continue  # that thread has just ended
        except (OSError, ValueError, IndexError):
            return None
    return total


class AwakeClock:
    """Monotonic time that does not count the supervisor's own stalls, and how much of
    the last one it spent waiting for a CPU (``starved``): a machine too busy to run the
    supervisor is not the supervisor blocking itself, and the two are said apart."""

    def __init__(self, now: float, tick: float,
                 waited: Callable[[], float | None] = cpu_wait):
        self._last = now
        self._tick = tick
        self._lost = 0.0
        self._waited = waited
        self._sample = (now, waited())
        self.starved: float | None = None  # of the last stall found; None: not known

    def read(self, now: float) -> tuple[float, float]:
        """(awake time now, seconds of stall found since the last read, else 0)."""
        gap = now - self._last
        stalled = gap - self._tick if gap > STALL else 0.0
        self._lost += stalled
        self._last = max(self._last, now)
        if stalled or now - self._sample[0] >= SAMPLE_EVERY:
            waited, (_, before) = self._waited(), self._sample
            if stalled:
                self.starved = None if waited is None or before is None else \
                    min(max(waited - before, 0.0), stalled)
            self._sample = (now, waited)
        return now - self._lost, stalled


def confirm_grace(beat_every: float, hang_timeout: float) -> float:
    """How long a silent process that is not stopped gets after its deadline: a few of
    its own beats, so one beat in flight cannot be missed."""
    return min(hang_timeout, max(CONFIRM_MIN, 3 * beat_every))


def verdict(silent: float, hang_timeout: float, stopped: bool,
            suspect_for: float | None, beat_every: float) -> str | None:
    """Why a beating process is hung, or None. ``silent``: awake seconds since its last
    beat; ``suspect_for``: awake seconds since it was first found silent past its
    deadline (None if it was not)."""
    if silent < hang_timeout:
        return None
    if stopped:
        return f"stopped, no heartbeat for {hang_timeout:g}s"
    if suspect_for is not None and suspect_for >= confirm_grace(beat_every, hang_timeout):
        return f"no heartbeat for {round(silent, 1):g}s"
    return None


LATE_BEATS = 2  # a beat this many of its own gaps late shows it unresponsive
LATE = "its heartbeats are late"
STOPPED = "stopped"
STOPS = (signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)  # stop a process


def beat_gap(next_in: object, beat_every: float | None) -> float | None:
    """The most seconds to a process's next beat, as its beat said (``next``); a library
    that says nothing beats at its interval."""
    if isinstance(next_in, int | float) and 0 < next_in < float("inf"):
        return float(next_in)
    return beat_every


def beat_hold(hold: object, gap: float | None) -> float:
    """The most seconds a beat may wait on its way, as its beat said (``hold``): a remote
    host's agent holds its processes' beats to send them together (host/relay.py), so
    a beat on time may come that much after its gap. 0 for a beat sent straight; never
    more than half the gap, whatever a beat says, so that no hold hides a silence."""
    if isinstance(hold, int | float) and 0 < hold < float("inf") and gap:
        return min(float(hold), gap / 2)
    return 0.0


def judge(rec: Worker, limit: float, awake: float, stopped: Callable[[], bool],
          late_beats: int = LATE_BEATS) -> tuple[str | None, str | None]:
    """Why a live process is unresponsive (shown at once, long before it is judged:
    LATE or STOPPED), or None; and why it is hung, or None: ``rec`` is its current
    start, ``limit`` its hang_timeout, ``awake`` awake time. Its suspicion is kept in
    it; ``stopped`` asks /proc, only when the silence needs it, so a tick reads /proc
    for no process that beats on time."""
    if rec.beat_every is not None:
        # The library beats from its own thread, and each beat says when the next is
        # due: a beat missing past that is worth a look in /proc (stopped: shown at
        # once), one late by more than its own gap again is late whatever /proc says.
        # A STOP the supervisor sent itself (a drill) is looked for at the next tick.
        silent = awake - rec.last_beat
        gap = rec.beat_gap or rec.beat_every
        due = gap + rec.beat_hold  # a relayed beat may wait this long and be on time
        stop_sent = rec.stop_sent_at is not None and rec.stop_sent_at >= rec.last_beat
        is_stopped = stopped() if silent > due or stop_sent or silent >= limit else False
        why = STOPPED if is_stopped else \
            LATE if silent >= late_beats * gap + rec.beat_hold else None
        if silent < limit:
            rec.suspect_since = None
            return why, None
        if rec.suspect_since is None:
            rec.suspect_since = awake
        return why, verdict(silent, limit, is_stopped, awake - rec.suspect_since,
                            rec.beat_every)
    if not stopped():  # a plain process: only /proc can tell
        rec.stopped_since = None
        return None, None
    if rec.stopped_since is None:
        rec.stopped_since = awake
    return STOPPED, f"stopped for {limit:g}s" if awake - rec.stopped_since >= limit else None


LOOK_SLACK = 0.05  # past a beat's gap, so a beat on time is in before the look


def next_look(rec: Worker, limit: float, awake: float, tick: float) -> float:
    """Awake seconds until a live process's silence may next mean something (a look
    then costs what ``judge`` costs): a process that beats on time is looked at once
    per beat, just after its next beat is due, never on every tick. One not beating
    (no hello yet, a plain script: only /proc can tell), silent past its gap, suspect,
    or sent a STOP is looked at every ``tick``, as before."""
    if rec.beat_every is None or rec.suspect_since is not None:
        return tick
    silent = awake - rec.last_beat
    due = min(rec.beat_gap or rec.beat_every, limit) + rec.beat_hold
    stop_sent = rec.stop_sent_at is not None and rec.stop_sent_at >= rec.last_beat
    if stop_sent or silent > due:
        return tick
    return due - silent + LOOK_SLACK
