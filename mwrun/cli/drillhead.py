"""``mwrun drill --head SECONDS``: the run's own head SIGKILLed as one more fault, at
random (its own Poisson process, mean SECONDS), while the worlds' faults go on.

A head kill is a fault of mwrun, not of the job: the job must not notice. So what it
measures is how long the run is without a head (the kill until a new head, its epoch
one more, has the run again: ``head_restart`` starts it at once), and the drill's
other figures (each world's pace, calls failed and breaks outside the faulted worlds)
say whether the job noticed. The drill waits for the new head before it goes on
(every request it makes needs one), and never kills a head in its first QUICK
seconds: the agent counts a head that dies that soon as a crash loop and backs off
(host/headrestart.py), which a drill must not provoke. Only a run whose topology has
a ``head_grace`` and ``head_restart`` may have its head killed: without them the kill
would end the job.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mwrun import runs
from mwrun.errors import RunError, UsageError
from mwrun.plan import topology
from mwrun.schema import TOPOLOGY

QUICK = 12.0  # seconds a new head lives before the drill kills it (the agent's QUICK is 10)
BACK_WAIT = 60.0  # seconds the drill waits for a new head before it gives up


@dataclass(frozen=True)
class HeadKill:
    """One head kill of the schedule, ``at`` seconds after the drill starts."""

    at: float


def schedule(seed: int | None, every: float, duration: float) -> Iterator[HeadKill]:
    """The head kills: exponential intervals of mean ``every``; one seed, the same
    times (a stream of their own: the faults' schedule is the same with or without)."""
    rng = random.Random(f"{seed}-head" if seed is not None else None)
    at = 0.0
    while True:
        at += rng.expovariate(1.0 / every)
        if at >= duration:
            return
        yield HeadKill(round(at, 3))


def check(run_id: str) -> None:
    """UsageError unless a new head takes the run back after its head is killed."""
    try:
        topo = topology.load(str(runs.run_path(run_id) / TOPOLOGY))
    except (OSError, RunError) as exc:
        raise UsageError(f"--head: the run's topology cannot be read ({exc})") from None
    if not topo.head_grace:
        raise UsageError(f"--head: run {run_id} has no head_grace: killing its head would"
                         " end the job; give its topology a head_grace (head_grace: 60)")
    if not topo.head_restart:
        raise UsageError(f"--head: run {run_id} has head_restart: false: nobody would start a"
                         " new head (mwrun adopt does, by hand)")
    if any(h.slurm for h in topo.hosts.values()):
        raise UsageError(f"--head: run {run_id} has hosts under Slurm, where no head is"
                         " started by itself (head_restart); mwrun adopt takes it back by"
                         " hand")


class HeadKills:
    def __init__(self, run_id: str, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        self.run_id, self.clock, self.sleep = run_id, clock, sleep
        self.kills: list[dict] = []  # each: at (wall), epoch before and after, back (s)
        self.skipped = 0  # due too soon after the last new head, with the drill ending
        self.since: float | None = None  # when the run's present head took it

    def kill(self, wait_until: Callable[[float], None], show: Callable[[str], None],
             ends: float) -> None:
        """SIGKILL the head (not before it is QUICK seconds old; not at all if that is
        after the drill ``ends``), then wait for the next one, ``show``ing so; RunError
        when none comes (the drill ends: the run is headless)."""
        if self.since is None:  # the head the drill found: since it started
            doc = runs.load_state(self.run_id)
            self.since = float(doc.get("supervisor_started_at") or doc.get("started_at")
                               or self.clock())
        if self.since + QUICK >= ends:
            self.skipped += 1
            return
        wait_until(self.since + QUICK)
        doc = runs.load_state(self.run_id)
        pid, epoch = doc.get("supervisor_pid"), int(doc.get("epoch") or 1)
        if not runs.supervisor_alive(doc) or not isinstance(pid, int):
            raise RunError(f"run {self.run_id} has no head to kill (state"
                           f" {doc.get('state')})")
        at = self.clock()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        kill = {"at": round(at, 4), "pid": pid, "epoch": epoch, "back": None}
        self.kills.append(kill)
        show(f"drill: head (pid {pid}, epoch {epoch}) killed; waiting for a new head")
        while (now := self.clock()) < at + BACK_WAIT:
            doc = runs.load_state(self.run_id)
            if int(doc.get("epoch") or 0) > epoch and "head" not in doc \
                    and runs.supervisor_alive(doc):
                kill["back"], kill["new_epoch"] = round(now - at, 4), doc["epoch"]
                self.since = now
                return
            self.sleep(0.02)
        raise RunError(f"no new head took run {self.run_id} back within {BACK_WAIT:.0f} s of"
                       f" its head's kill (pid {pid}): see its supervisor.log")

    def record(self) -> dict:
        """What the drill's record keeps of them (records/drills.py reads it)."""
        back = [k["back"] for k in self.kills if k["back"] is not None]
        return {"kills": len(self.kills), "back_median": _r(statistics.median(back))
                if back else None, "back_max": _r(max(back)) if back else None,
                "not_back": len(self.kills) - len(back), "skipped": self.skipped,
                "list": self.kills}


def _r(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)
