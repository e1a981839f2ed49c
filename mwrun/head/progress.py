"""What the launch says while the job comes up: what started how (warm or cold), once
the first start of every process is known (a warm start waits for its zygote's
imports), and then when every world has formed. Counts kept as things happen, never a
look at every process or world after every event."""

from __future__ import annotations

import time
from collections.abc import Callable

from mwrun.head.events import Event, WorldFormed
from mwrun.schema import Start
from mwrun.terminal import count


class Progress:
    def __init__(self, processes: list[str], worlds: list[str], say: Callable[[str], None],
                 starts: Callable[[], dict[str, Start]], started_at: float):
        self.say, self.starts = say, starts  # process -> how it was started
        self.started_at = started_at
        self.unstarted: set[str] | None = set(processes)  # first start not known yet
        self.unformed = set(worlds)  # not formed yet since launch
        self.worlds = len(worlds)

    def started(self, name: str) -> None:
        """Process ``name`` started (or could not): said once every one is known."""
        if self.unstarted is None:
            return
        self.unstarted.discard(name)
        if self.unstarted:
            return
        self.unstarted = None
        starts = self.starts()
        warm = sum(1 for how in starts.values() if how is Start.WARM)
        self.say(f"{count(len(starts), 'process', 'processes')} started in"
                 f" {time.time() - self.started_at:.1f}s ({warm} warm, {len(starts) - warm}"
                 f" cold); waiting for {count(self.worlds, 'world')} to form")

    def __call__(self, event: Event) -> None:
        """A subscriber of the supervisor's events: said once every world has formed."""
        if isinstance(event, WorldFormed) and event.world in self.unformed:
            self.unformed.discard(event.world)
            if not self.unformed:
                self.say(f"every world formed, {time.time() - self.started_at:.1f}s"
                         " after launch")
