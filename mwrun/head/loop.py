"""The head's one loop, and the composition root of the head: it builds the parts and
drives them.

What the supervisor acts through is the ``Router`` (router.py: from a process to the
hands of its host, ``host.hands.Hands`` for this machine, ``Agents`` for the others;
the stores; the way down to each library). The loop is those hands' ``Owner``: what
they tell (spawned, lines, exited, lost) goes to the supervisor and the console. Its
``run()`` is a single-threaded select loop over every child's exit descriptor (a
pidfd: an exit is seen the moment it happens, not at the next poll), every child's
output pipe, the agents' links, the control socket, and the signal wakeup pipe;
between events it sleeps until the supervisor's next deadline. The control handlers
(control.py) see it as a ``Run``.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from mwrun.head.decide.deadlines import Timer, Timers
from mwrun.head.decide.events import Event, Events, Gone, Said, WorldRemoved, lines
from mwrun.head.decide.supervisor import TICK, Supervisor
from mwrun.head.hosts.agents import Agents
from mwrun.head.hosts.downlink import Downlink
from mwrun.head.hosts.router import Router
from mwrun.head.observe import document
from mwrun.head.observe.console import Printer
from mwrun.head.observe.faults import Faults
from mwrun.head.observe.history import SAMPLE_EVERY, History
from mwrun.head.observe.progress import Progress
from mwrun.head.observe.scaleops import Ops
from mwrun.head.observe.traffic import Traffic
from mwrun.head.postmortem.capture import Postmortems
from mwrun.head.postmortem.stacks import Stacks
from mwrun.head.serve import control
from mwrun.head.serve.early import Early
from mwrun.head.serve.elastic import Elastic
from mwrun.head.wakeups import Wakeups
from mwrun.host import sockets
from mwrun.host.hands import Hands
from mwrun.host.spy import Spies
from mwrun.membership.revision import Membership
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import Plan
from mwrun.plan.topology import Topology
from mwrun.schema import STATE, ZYGOTE_LOG

OUTPUT_PER_TURN = 64 * 1024  # bytes of children's output handled in one turn, shared
OUTPUT_SLICE_MIN = 4096
FINISH_WAIT = 2.0  # at the very end, for the last exits and output after SIGKILL


class View(Mapping):
    """A live mapping over the supervisor's records (its processes or its worlds): what
    faults.py reads of the membership, as it is now (it changes while the job runs)."""

    def __init__(self, records: Callable[[], Mapping], pick: Callable[[Any], list[str]]):
        self.records, self.pick = records, pick

    def __getitem__(self, key: str) -> list[str]:
        return self.pick(self.records()[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.records())

    def __len__(self) -> int:
        return len(self.records())


class Loop:
    def __init__(self, plan: Plan, run_id: str, run_dir, stores, printer: Printer, grace: float,
                 control_path: str, topology: Topology, inventory: dict[str, HostInventory],
                 links: dict | None = None, reach=None, hosts: list | None = None):
        self.run_id = run_id
        self.run_dir = run_dir
        self.stores = stores
        self.printer = printer
        self.control_path = control_path
        self.started_at = time.time()
        self.selector = selectors.DefaultSelector()
        self.clients = control.Clients(self.selector, lambda line, connection: control.serve(
            self, line, connection))
        self.timers = Timers()  # every timer of the head, in one heap (decide/deadlines.py)
        self.traffic = Traffic()
        # What the job should be made of: the plan as launched, then each revision.
        self.membership = Membership(topology, plan, inventory, sys.executable,
                                     stores.choose_port)
        self.history = History(run_dir, {"run_id": run_id, "name": plan.name, "worlds": {
            n: list(w.members) for n, w in plan.worlds.items()}})
        # The remote hosts' hands (their agents), if any; this host's own are ``hands``.
        self.agents = Agents(links, self, reach, lambda n: self.plan.processes[n].host,
                             self.selector, lambda request: control.relayed(self, request),
                             lambda *told: self.postmortems.outside_told(*told)
                             ) if links else None
        self.downlink = Downlink(self.clients.push, lambda process, message: (
            self.agents is not None and self.agents.tell(process, message)))
        self.stacks = Stacks(self.downlink.tell, time.monotonic)  # mwrun stacks: the asks
        self.early = Early()  # what a start says before its pid is told
        self.hosts = hosts or []  # the status document's host entries (name, addr)
        self.writer = document.Writer(run_dir / STATE, lambda: document.build(self),
                                      lambda: document.outside(self))
        # The fault timeline (hears each event first; its ids tag history records), scale phases.
        self.faults = Faults(View(lambda: self.supervisor.procs, lambda r: list(r.plan.worlds)),
                             View(lambda: self.supervisor.worlds,
                                  lambda w: list(w.plan.members)),
                             lambda world: self.supervisor.worlds[world].generation,
                             self._fault_closed, time.time)
        self.postmortems = Postmortems(  # bundles: stacks from inside (asks), outside (py-spy)
            run_dir, self.stacks, lambda told: Spies(self.selector, time.monotonic, told),
            lambda: self.supervisor, lambda: self.router,
            self.history.postmortem, time.monotonic, time.time)
        self.history.tags = self.faults.tags
        self.ops = Ops(self.history.scale, time.time, self.say)
        # Who hears it: console and events.log, faults, history, scale operations, state.json.
        self.progress = Progress(list(plan.processes), list(plan.worlds), self.say,
                                 lambda: self.router.starts, self.started_at)
        self.events = Events((lines(printer.event), self.faults, self.history, self.ops,
                              self.writer, self.progress, self.postmortems, self._gone))
        self.hands = Hands(self.selector, self, run_dir / ZYGOTE_LOG,
                           lambda: self.supervisor.stopping)
        self.router = Router(lambda: self.plan, self.hands, self.agents, stores,
                             self.downlink, run_id, control_path, self.progress.started)
        self.supervisor = Supervisor(plan, self.router, self.events, grace, self.postmortems.wait,
                                     self.timers)
        self.usage = document.Usage(self.router.usage_of, self.agents.refresh_usage
                                    if self.agents is not None else lambda: None)
        self.elastic = Elastic(self.membership, self.supervisor, self.ops,
                               self.router.host_up, run_dir)
        self._handle_timers()

    @property
    def plan(self) -> Plan:
        """The plan as it is now: the launch plan, or its latest revision."""
        return self.membership.plan

    now = staticmethod(time.monotonic)  # the head's clocks, as the control handlers read them
    wall = staticmethod(time.time)

    def host_time(self, name: str, t: float) -> float:
        return self.router.host_time(name, t)

    def _fault_closed(self, record: dict) -> None:
        self.history.fault(record)
        self.postmortems.fault(record)  # beside its bundle, if it has one

    # -- what the hands (here, or a host's agent) tell: host.hands.Owner ------------------

    def spawned(self, name: str, pid: int, warm: bool, at: float | None = None) -> None:
        """``at``: when its host (a remote agent) made it, on the head's clock."""
        self.supervisor.on_spawned(name, pid, at)
        self.router.spawned(name, warm)
        for request, connection in self.early.take(name, pid):  # said before its pid came
            control.dispatch(self, request, connection)

    def failed(self, name: str, error: str) -> None:
        self.supervisor.on_spawn_failed(name, error)
        self.progress.started(name)

    def lines(self, name: str, lines: list[str]) -> None:
        self.printer.lines(name, lines)

    def exited(self, name: str, code: int, at: float | None = None) -> None:
        """``at``: when its host (a remote agent) saw the exit, on the head's clock."""
        self.supervisor.on_exit(name, code, at=at)

    def lost(self, name: str, reason: str) -> None:
        self.supervisor.on_exit(name, None, lost=reason)

    def say(self, text: str) -> None:
        self.events.emit(Said(text))

    def _gone(self, event: Event) -> None:
        """A retired replica exited: it leaves the job (its resources are free again);
        a removed world's traffic goes with it."""
        if isinstance(event, Gone):
            self.membership.gone(event.process)
            self.router.forget(event.process)
        elif isinstance(event, WorldRemoved):
            self.traffic.forget(event.world)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        wanted = len(self.plan.processes) + 64  # each connects once, all at about once
        listener = control.listen(self.control_path, wanted)
        if sockets.somaxconn() < wanted:
            self.say(f"net.core.somaxconn is {sockets.somaxconn()}, below the {wanted}"
                     " connections this job may make at once; processes that find the"
                     " backlog full keep trying, so they are supervised a little later")
        self.selector.register(listener, selectors.EVENT_READ, (self.clients.accept, listener))
        wakeups = Wakeups(self.selector, self.supervisor.request_stop)
        if self.agents is not None:
            self.agents.attach()
        wakeups.install()
        try:
            for name in self.plan.processes:  # every zygote at once: imports side by side
                self.router.prepare(name)
            self.supervisor.start()
            self.stores.serve(wakeups.wake)
            self.writer.save()
            while not self.supervisor.finished:
                self._step()
        finally:
            wakeups.restore()
            self._finish(listener, wakeups)
        return self.supervisor.exit_code

    def _handle_timers(self) -> None:
        """The loop's own timers in the head's one heap (the supervisor's are its own):
        its periodic turn, the history's samples, state.json written behind, and a
        bundle's capture running out (a wakeup: ``postmortems.step`` runs every turn)."""
        self.timers.handle(Timer.TICK, self._tick)
        self.timers.handle(Timer.SAMPLE, self._sample)
        self.timers.handle(Timer.SAVE, lambda name, now: self.writer.save())
        self.timers.handle(Timer.CAPTURE, lambda name, now: None)
        self.timers.set((Timer.TICK, ""), 0.0)
        self.timers.set((Timer.SAMPLE, ""), 0.0)

    def _tick(self, name: str, now: float) -> None:
        """Once a TICK, whatever else is due: the agents' links beaten, the reaper, scale
        operations waited for no longer, plain worlds' stores looked into."""
        if self.agents is not None:
            self.agents.tick(now)
        self.hands.tick()
        self.ops.tick()
        self.supervisor.members.look_into_stores(self.stores.plain_ranks)
        self.timers.set((Timer.TICK, name), now + TICK)

    def _sample(self, name: str, now: float) -> None:
        self.history.sample(document.rates(self, now, SAMPLE_EVERY),
                            self.traffic.totals(now, time.time()))
        self.timers.set((Timer.SAMPLE, name), now + SAMPLE_EVERY)

    def _step(self) -> None:
        due = self.timers.earliest()  # never None: TICK is always set
        wait = 0.0 if self.clients.backlog or due is None else max(due - time.monotonic(), 0.0)
        output = []
        for key, _ in self.selector.select(wait):
            callback, arg = key.data
            if callback == self.hands.drain:
                output.append(arg)
            else:
                callback(arg)  # exits, signals, control: before any output
        # Output in a bounded slice per child per turn: a child printing faster than
        # the loop can show it must not keep exits, timers and requests waiting.
        share = max(OUTPUT_PER_TURN // max(len(output), 1), OUTPUT_SLICE_MIN)
        for child in output:
            self.hands.drain(child, share)
        self.clients.serve_backlog()
        if self.agents is not None:
            self.agents.handle_pending()  # frames read while awaiting an answer
        self.stores.ready()  # what waited for the stores is written once they exist
        for name in self.postmortems.step():  # captured: a hung member's kill goes now
            self.supervisor.processes.kill_hung(name)
        self.timers.fire(time.monotonic())
        self.writer.save()
        self._behind(Timer.SAVE, self.writer.due)
        self._behind(Timer.CAPTURE, self.postmortems.earliest())

    def _behind(self, kind: Timer, when: float | None) -> None:
        """A part that keeps its own time (state.json's writer, the bundles) wakes the
        loop through the heap: its next moment set, or moved, only when it changed."""
        key = (kind, "")
        if when is None:
            self.timers.clear(key)
        elif self.timers.when(key) != when:
            self.timers.set(key, when)

    def _finish(self, listener, wakeups: Wakeups) -> None:
        """Leave nothing behind, and never wait without limit: every host's hands
        SIGKILL what they still run (agents told to stop do it on theirs), this host's
        wait at most FINISH_WAIT for the last exits and the last output (a process
        stuck in the kernel dies when it can)."""
        deadline = time.monotonic() + FINISH_WAIT
        self.postmortems.close()
        codes = self.agents.close() if self.agents is not None else {}
        codes.update(self.hands.close(deadline))
        for name, code in codes.items():
            self.supervisor.on_exit(name, code)  # only after an exception in the loop
        self.writer.save(force=True)  # the final state, never held back
        self.history.close()
        listener.close()
        wakeups.close()
        with contextlib.suppress(OSError):
            os.unlink(self.control_path)
        self.selector.close()
        self.stores.close()

    # -- the status document (head/document.py) -------------------------------------------

    def document(self, fresh_usage: bool = False) -> dict:
        return document.build(self, fresh_usage)

