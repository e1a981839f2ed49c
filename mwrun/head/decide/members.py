"""What the library inside each process tells its supervisor (worlds/supervisor_link.py,
through serve/library.py): its hello, its heartbeats, its bye, a hung abort; each world it
joined, left, saw break, released, or (a plain torch.distributed script, which says
nothing) what its world's store shows. Each message from an earlier start of the
process (another pid) is ignored. What a message marks is reconciled by the supervisor
(``reconcile``: the worlds of the processes it touched).
"""

from __future__ import annotations

from collections.abc import Callable

from mwrun.head.decide.beats import Beats
from mwrun.head.decide.processbook import Processes
from mwrun.head.decide.reshaping import Reshaping
from mwrun.head.decide.worldbook import Worlds
from mwrun.protocol import WorldReport
from mwrun.schema import WorldState as W


class Members:
    def __init__(self, processes: Processes, beats: Beats, book: Worlds, reshaping: Reshaping,
                 reconcile: Callable[..., None]):
        self.processes, self.beats, self.book, self.reshaping = processes, beats, book, reshaping
        self.reconcile = reconcile  # the supervisor: what a message marked, reconciled

    def on_hello(self, name: str, pid: int, interval: float, nccl: str | None = None) -> None:
        rec = self.processes.live(name, pid)
        if rec is not None:  # else a message from an earlier incarnation
            self.beats.hello(rec, interval, nccl)
            self.reconcile(rec)

    def current(self, name: str, pid: int) -> bool:
        """Whether ``pid`` is the process's start now (not an earlier one's message)."""
        return self.processes.live(name, pid) is not None

    def on_abort_hung(self, name: str, pid: int, reason: str) -> None:
        """Its communicator's abort never returned (worlds/aborts.py): killed as hung."""
        rec = self.processes.live(name, pid)
        if rec is not None and rec.state.alive and rec.worker.hung is None:
            self.beats.hang(rec, reason or "a communicator abort did not return")

    def on_heartbeat(self, name: str, pid: int, next_in: object = None,
                     hold: object = None) -> None:
        """A beat, the most seconds to its next one (hangs.beat_gap) and the most its
        beats wait on the way (hangs.beat_hold), as it says."""
        rec = self.processes.live(name, pid)
        if rec is not None:
            self.beats.heartbeat(rec, next_in, hold)

    def on_bye(self, name: str, pid: int) -> None:
        rec = self.processes.live(name, pid)
        if rec is not None:
            rec.worker.beat_every = None  # it left its worlds; from now on /proc tells if it hangs

    def on_world_event(self, name: str, pid: int, world_name: str, generation: int,
                       event: str, reason: str = "") -> None:
        rec, world = self.processes.live(name, pid), self.book.records.get(world_name)
        if rec is None or world is None or world_name not in rec.plan.worlds:
            return
        left = any(world_name in self.processes.records[m].worker.left for m in world.plan.members)
        if event == WorldReport.READY and generation == world.generation:
            rec.worker.ready.add(world_name)
            rec.worker.generations[world_name] = generation
        elif event == WorldReport.CLOSED and generation == world.generation:
            rec.worker.left.add(world_name)  # its exit decides whether the world goes on
        elif event == WorldReport.RELEASED and world.state is W.DRAINING:
            self.reshaping.over(world, f"{name} released it")
        elif event == WorldReport.BROKEN and generation == world.generation and not left \
                and world.state in (W.FORMING, W.HEALTHY):
            # A member saw the break first (a timeout, a drill by hand): its store says
            # so already; the rest of the world follows it to the next generation.
            self.book.broke(world, reason, written=True)
        self.reconcile(rec, only=[world_name])  # what one world's news moved: that world
