"""What the launch says while the job comes up: what started how (warm or cold), once
the first start of every process is known (a warm start waits for its zygote's
imports), and then when every world has formed. Heard from the supervisor's events
(a start made, a start that could not be), counts kept as things happen, never a look
at every process or world after every event.

``view`` is what ``launch --detach`` waits on (the control verb ``bringup``): the
worlds not formed yet since launch, what can be said of each, and the processes that
failed before their worlds formed."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from mwrun.head.decide.events import Event, Exited, Spawned, WorldFormed
from mwrun.head.decide.records import ProcessRecord, WorldRecord
from mwrun.schema import ProcessState as P
from mwrun.schema import Start
from mwrun.terminal import count


class Progress:
    def __init__(self, processes: list[str], worlds: list[str], say: Callable[[str], None],
                 started_at: float, found: set[str] | None = None):
        """``found``: an adopting head's (``mwrun adopt``), the processes it found
        running; ``started_at`` is then the adoption's moment."""
        self.say = say
        self.found = found
        self.starts: dict[str, Start | None] = {}  # process -> how its first start was made
        self.started_at = started_at
        self.unstarted: set[str] | None = set(processes)  # first start not known yet
        self.unformed = set(worlds)  # not formed yet since launch
        self.worlds = len(worlds)

    def started(self, name: str, start: Start | None = None) -> None:
        """Process ``name`` started (``start``: how), or could not (None): said once
        every one is known."""
        if self.unstarted is None or name not in self.unstarted:
            return
        self.unstarted.discard(name)
        if start is not None:
            self.starts[name] = start
        if self.unstarted:
            return
        self.unstarted = None
        starts = self.starts
        warm = sum(1 for how in starts.values() if how is Start.WARM)
        if self.found is not None:
            made = len(starts) - len(self.found & set(starts))
            self.say(f"{count(len(starts), 'process', 'processes')} running"
                     f" {time.time() - self.started_at:.1f}s after adoption"
                     f" ({len(starts) - made} found running, {made} started); waiting for"
                     f" {count(self.worlds, 'world')} to form")
            return
        self.say(f"{count(len(starts), 'process', 'processes')} started in"
                 f" {time.time() - self.started_at:.1f}s ({warm} warm, {len(starts) - warm}"
                 f" cold); waiting for {count(self.worlds, 'world')} to form")

    def __call__(self, event: Event) -> None:
        """A subscriber of the supervisor's events: the starts made (or not), and said
        once every world has formed."""
        if isinstance(event, Spawned):
            self.started(event.process, event.start)
        elif isinstance(event, Exited) and event.pid is None:  # it could not start
            self.started(event.process)
        elif isinstance(event, WorldFormed) and event.world in self.unformed:
            self.unformed.discard(event.world)
            if not self.unformed:
                self.say(f"every world formed, {time.time() - self.started_at:.1f}s"
                         f" after {'launch' if self.found is None else 'adoption'}")


def view(unformed: set[str], procs: Mapping[str, ProcessRecord],
         worlds: Mapping[str, WorldRecord], now: float) -> dict:
    """What ``launch --detach`` needs to tell whether the job came up: per world not
    formed yet (``unformed``: a world that formed once and broke since did come up)
    whether a member joins through mwrun's library (it said hello), whether mwrun can
    see a plain group in its store, and for how long every member has run (None while
    one has no pid: not started yet, or ended); and the processes of those worlds that
    failed (or were restarted) before they formed, with what happened to them.
    ``now``: the monotonic clock the records' ``started`` is on. ``worlds``: how many
    the job has now."""
    waiting = {}
    failed = {}
    for name in sorted(unformed):
        world = worlds.get(name)
        if world is None:  # removed (scaled away) before it formed: nothing to wait for
            continue
        members = [procs[m] for m in world.plan.members if m in procs]
        up = [now - rec.worker.started for rec in members
              if rec.state.alive and rec.worker.pid is not None]
        waiting[name] = {"state": world.state.value,
                         "library": any(rec.worker.said_hello for rec in members),
                         "opaque": world.opaque is not None,
                         "up_s": round(min(up), 3) if up and len(up) == len(members)
                         else None}
        for rec in members:
            if rec.state in (P.FAILED, P.RESTARTING) or rec.restarts > 0 \
                    or rec.worker.exit_code not in (None, 0):
                failed[rec.plan.name] = rec.why or rec.state.value
    return {"worlds": len(worlds), "waiting": waiting, "failed": failed}
