"""The head's one loop, and the composition root of the head: it builds the parts and
drives them.

What the supervisor acts through is the ``Router`` (router.py: from a process to the
agent of its host, this machine's included: the head starts no process itself; the
stores; the way down to each library). What the agents tell (spawned, lines, exited,
lost) is ``Heard``, their ``Head``, and goes to the supervisor and the console. Its
``run()`` is a single-threaded select loop over the agents' links (an exit is seen by
its agent's pidfd the moment it happens, and told at once), the control socket, and
the signal wakeup pipe; between events it sleeps until the supervisor's next deadline.
The control verbs (serve/verbs.py, serve/library.py) are handed the parts they use,
never the loop; the ``Dispatcher`` (serve/dispatcher.py) serves the control socket's
lines and the agents' relayed messages to them. The loop hands itself to no part:
``Heard`` is the agents' ``Head``: typed seams, checked by mypy.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from mwrun.errors import RunError, StaleHead
from mwrun.head import epochs
from mwrun.head.decide import adoption
from mwrun.head.decide.deadlines import Timer, Timers, next_on_grid
from mwrun.head.decide.events import Event, Events, Gone, Said, Stopping, WorldRemoved, lines
from mwrun.head.decide.plain import PlainGroups
from mwrun.head.decide.supervisor import TICK, Supervisor
from mwrun.head.hosts.agents import Agents
from mwrun.head.hosts.downlink import Downlink
from mwrun.head.hosts.router import Router
from mwrun.head.hosts.stores import StoreKeeper
from mwrun.head.observe import document, rundir
from mwrun.head.observe.console import Printer
from mwrun.head.observe.downtimes import Downtimes
from mwrun.head.observe.faults import Faults
from mwrun.head.observe.history import SAMPLE_EVERY, Counted, History
from mwrun.head.observe.opbook import OpBook
from mwrun.head.observe.progress import Progress
from mwrun.head.observe.scaleops import Ops
from mwrun.head.observe.slowwatch import SlowWatch
from mwrun.head.observe.traffic import Traffic
from mwrun.head.postmortem.capture import Postmortems
from mwrun.head.postmortem.stacks import Stacks
from mwrun.head.serve import control
from mwrun.head.serve.dispatcher import Dispatcher
from mwrun.head.serve.elastic import Elastic
from mwrun.head.serve.library import Library
from mwrun.head.serve.verbs import Verbs
from mwrun.head.wakeups import Wakeups
from mwrun.host import sockets
from mwrun.membership.revision import Membership
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import Plan
from mwrun.plan.topology import Topology
from mwrun.records import Tally
from mwrun.schema import HEAD_AWAY, OPS, STATE, TOPOLOGY, Start

if TYPE_CHECKING:
    from mwrun.head.serve.scrapes import Scrapes

UNSENT_LOOK = 0.005  # seconds between tries while a link's pipe is full
WAITS_SPAN = 3.0  # seconds of beats each history sample's waits are a mean over


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


class Leaving:
    """A subscriber of the supervisor's events: a retired replica exited, so it leaves
    the job (its resources are free again); a removed world's traffic goes with it; the
    job stopping leaves every host (their agents start nothing more)."""

    def __init__(self, membership: Membership, router: Router, traffic: Traffic):
        self.membership, self.router, self.traffic = membership, router, traffic

    def __call__(self, event: Event) -> None:
        if isinstance(event, Gone):
            self.membership.gone(event.process)
            self.router.forget(event.process)
        elif isinstance(event, WorldRemoved):
            self.traffic.forget(event.world)
        elif isinstance(event, Stopping):
            self.router.stopping()


class Rounds:
    """The loop's own timers in the head's one heap (the supervisor's are its own): its
    periodic turn, the history's samples (and the slow members told with them),
    state.json written behind, and a bundle's capture running out (a wakeup only: the
    bundles are stepped every turn)."""

    def __init__(self, timers: Timers, beat_agents: Callable[[float], None], ops: Ops,
                 plain: PlainGroups,
                 plain_ranks: Callable[[str], set[int] | None], history: History,
                 status: document.Status, traffic: Traffic, writer: document.Writer,
                 postmortems: Postmortems, slow: SlowWatch):
        self.timers, self.beat_agents, self.ops = timers, beat_agents, ops
        self.plain, self.plain_ranks = plain, plain_ranks
        self.history, self.status, self.traffic = history, status, traffic
        self.writer, self.postmortems, self.slow = writer, postmortems, slow
        self.kept: dict[Timer, float | None] = {}  # what behind() last set, per kind
        self.tick_due: float | None = None  # when the next TICK is due (none set yet)
        self.lag = 0.0  # how late the last TICK ran (the metrics' loop lag)
        timers.handle(Timer.TICK, self._tick)
        timers.handle(Timer.SAMPLE, self._sample)
        timers.handle(Timer.SAVE, lambda name, now: writer.save())
        timers.handle(Timer.CAPTURE, lambda name, now: None)
        timers.set((Timer.TICK, ""), 0.0)
        timers.set((Timer.SAMPLE, ""), 0.0)

    def _tick(self, name: str, now: float) -> None:
        """Once a TICK, whatever else is due: the agents' links beaten (their ends
        reaped), scale operations waited for no longer, plain worlds' stores looked
        into."""
        self.lag = 0.0 if self.tick_due is None else max(now - self.tick_due, 0.0)
        self.beat_agents(now)
        self.ops.tick()
        self.plain.look_into_stores(self.plain_ranks)
        self.tick_due = next_on_grid(now, TICK)
        self.timers.set((Timer.TICK, name), self.tick_due)

    def _sample(self, name: str, now: float) -> None:
        self.history.sample(self.status.rates(now, SAMPLE_EVERY),
                            self.traffic.totals(now, time.time()),
                            self.status.waits(now, WAITS_SPAN))
        self.slow.check(now)
        self.timers.set((Timer.SAMPLE, name), next_on_grid(now, SAMPLE_EVERY))

    def behind(self) -> None:
        """A part that keeps its own time (state.json's writer, the bundles) wakes the
        loop through the heap: its next moment set, or moved, only when it changed
        (asked after every turn, so a turn that changed neither costs two compares)."""
        for kind, when in ((Timer.SAVE, self.writer.due),
                           (Timer.CAPTURE, self.postmortems.earliest())):
            if self.kept.get(kind) == when:
                continue
            self.kept[kind] = when
            key = (kind, "")
            if when is None:
                self.timers.clear(key)
            else:
                self.timers.set(key, when)


class Heard:
    """What the hosts' agents tell, turned into the supervisor's events and the
    console's lines: ``hosts.agents.Head``. The supervisor and the dispatcher are built
    after the agents that tell this (they act through them), so both are reached when
    told."""

    def __init__(self, printer: Printer, events: Callable[[], Events],
                 supervisor: Callable[[], Supervisor], dispatcher: Callable[[], Dispatcher]):
        self.printer = printer
        self._events, self._supervisor, self._dispatcher = events, supervisor, dispatcher

    wall = staticmethod(time.time)  # the head's wall clock, as the agents read it

    def spawned(self, name: str, pid: int, warm: bool, at: float | None = None) -> None:
        """``at``: when its host (a remote agent) made it, on the head's clock."""
        self._supervisor().on_spawned(name, pid, at, Start.WARM if warm else Start.COLD)
        self._dispatcher().pid_told(name, pid)  # what it said before its pid came

    def failed(self, name: str, error: str) -> None:
        self._supervisor().on_spawn_failed(name, error)

    def lines(self, name: str, lines: list[str]) -> None:
        self.printer.lines(name, lines)
        self._supervisor().first_words.heard(name, lines)  # why it could not start, if so

    def exited(self, name: str, code: int, at: float | None = None) -> None:
        """``at``: when its host (a remote agent) saw the exit, on the head's clock."""
        self._supervisor().on_exit(name, code, at=at)

    def lost(self, name: str, reason: str) -> None:
        self._supervisor().on_exit(name, None, lost=reason)

    def say(self, text: str) -> None:
        self._events().emit(Said(text))


class Ends:
    """How the loop ends: leaving nothing behind (``finish``), or, once a newer head
    has the run, touching nothing of it (``stale``)."""

    def __init__(self, postmortems: Postmortems, scrapes: Scrapes | None, agents: Agents,
                 supervisor: Supervisor, writer: document.Writer, history: History,
                 stores: StoreKeeper, selector: selectors.BaseSelector, control_path: str):
        self.postmortems, self.scrapes, self.agents = postmortems, scrapes, agents
        self.supervisor, self.writer, self.history = supervisor, writer, history
        self.stores, self.selector, self.control_path = stores, selector, control_path

    def finish(self, listener, wakeups: Wakeups) -> None:
        """Leave nothing behind, and never wait without limit: every host's agent is
        told to stop and SIGKILLs what it still runs (each waited for a few seconds at
        most: remote.CLOSE_WAIT; a process stuck in the kernel dies when it can)."""
        self.postmortems.close()
        if self.scrapes is not None:
            self.scrapes.close()
        codes = self.agents.close()
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

    def stale(self, listener, wakeups: Wakeups) -> None:
        """A newer head has the run: nothing is told, stopped or written (the agents,
        the keeper, state.json and the control socket's path are the new head's now);
        only this process's own descriptors and threads end."""
        self.postmortems.close()
        if self.scrapes is not None:
            self.scrapes.close()
        self.history.close()
        listener.close()
        wakeups.close()
        self.selector.close()
        self.stores.abandon()


class Loop:
    # Reached by a lambda before they are built: each in a cycle (said where), the rest in order.
    dispatcher: Dispatcher
    events: Events
    postmortems: Postmortems
    router: Router
    supervisor: Supervisor
    status: document.Status

    def __init__(self, plan: Plan, run_id: str, run_dir, stores: StoreKeeper, printer: Printer,
                 grace: float,
                 control_path: str, topology: Topology, inventory: dict[str, HostInventory],
                 links: dict, reach, hosts: list | None = None,
                 started_at: float | None = None,
                 taken: adoption.Taken | None = None, epoch: int = 1):
        self.run_id = run_id
        # A new head's (mwrun adopt): the plan as revised (``plan``), the job as found
        self.taken = taken
        found = None if taken is None else taken.found  # the starts its agents run now
        self.run_dir = run_dir
        self.fence = epochs.Fence(run_dir, epoch)  # still the run's head? (every wakeup)
        self.stores = stores
        self.printer = printer
        self.control_path = control_path
        # The run's start: the launch's (its agents and zygotes start before this loop).
        self.started_at = time.time() if started_at is None else started_at
        self.selector = selectors.DefaultSelector()
        # What the hands tell (spawned, lines, exited, lost), and what the head says.
        self.heard = heard = Heard(printer, lambda: self.events, lambda: self.supervisor,
                                   lambda: self.dispatcher)
        self.say = heard.say
        self.clients = control.Clients(self.selector, lambda line, connection:  # the verbs
            self.dispatcher.serve(line, connection))  # answer through clients.push (downlink)
        self.timers = Timers()  # every timer of the head, in one heap (decide/deadlines.py)
        self.traffic = Traffic()
        self.downtimes = Downtimes()  # each world's faults, for the metrics
        # What the job should be made of: the plan as launched, then each revision.
        membership = self.membership = Membership(
            topology, plan, inventory, sys.executable, stores.choose_port,
            None if taken is None else taken.revised.replicas, 0 if taken is None else
            taken.revised.number)
        # Every host's hands, this machine's included: its agents (they relay to the
        # verbs, capture for the bundles, and one starts the stores' keeper).
        self.agents = agents = Agents(
            links, heard, reach, lambda n: membership.plan.processes[n].host, self.selector,
            lambda request: self.dispatcher.relayed(request),
            lambda *told: self.postmortems.outside_told(*told), stores.kept,
            epochs.told(run_dir, epoch), lambda host, hello: rundir.note_agent(
                run_dir, host, hello), (plan.store_host, str(run_dir / HEAD_AWAY)))
        self.downlink = Downlink(self.clients.push, agents.tell)
        self.stacks = Stacks(self.downlink.tell, time.monotonic)  # mwrun stacks: the asks
        self.progress = Progress(list(plan.processes), list(plan.worlds), self.say,
                                 self.started_at if found is None else time.time(),
                                 None if found is None else set(found))
        self.router = router = Router(lambda: membership.plan, agents, stores,
                                      self.downlink, run_id)
        # The listeners hear the supervisor, and read it. The fault timeline (hears each
        # event first; its ids tag history records), scale phases, bundles, state.json.
        self.faults = Faults(View(lambda: self.supervisor.procs, lambda r: list(r.plan.worlds)),
                             View(lambda: self.supervisor.worlds,
                                  lambda w: list(w.plan.members)),
                             lambda world: self.supervisor.worlds[world].generation,
                             self._fault_closed, time.time)
        self.history = History(run_dir, {"run_id": run_id, "name": plan.name, "worlds": {
            n: list(w.members) for n, w in plan.worlds.items()}}, tags=self.faults.tags)
        self.ops = Ops(self.history.scale, time.time, self.say, OpBook(run_dir / OPS))
        self.postmortems = Postmortems(  # bundles: stacks from inside (asks), outside (py-spy)
            run_dir, self.stacks, lambda: self.supervisor, lambda: router,
            self.history.postmortem, time.monotonic, time.time)
        self.usage = document.Usage(router.usage_of, agents.refresh_usage)
        self.writer = document.Writer(run_dir / STATE, lambda: self.status.build(),
                                      lambda: self.status.outside(), spent=self.usage.cost)
        # Who hears it: console and events.log, faults, history, scale operations, state.json.
        self.tally = Tally()  # restarts and breaks for the finish line, as report counts
        self.events = Events((lines(printer.event), self.faults, self.history, self.ops,
                              self.writer, self.progress, self.postmortems,
                              Leaving(membership, router, self.traffic), Counted(self.tally)))
        self.supervisor = supervisor = Supervisor(plan, router, self.events, grace,
                                                  self.postmortems.wait, self.timers)
        self.elastic = Elastic(membership, supervisor, self.ops, router.host_up, run_dir)
        self.status = document.Status(
            document.Facts(run_id, self.started_at, str(run_dir / TOPOLOGY), control_path,
                           epoch, None if found is None else time.time()),
            supervisor, membership, self.usage, self.traffic,
            self.faults, self.ops, self.postmortems, self.elastic, agents,
            hosts or [])  # the document's host entries (name, addr)
        # The control verbs: the operator's, the library's, and the one way in to both.
        verbs = Verbs(supervisor, supervisor.stop, self.progress, self.history, self.elastic,
                      self.stacks, self.status.build, time.monotonic)
        library = Library(supervisor.members, self.downlink, self.traffic, self.faults,
                          self.ops, self.stacks, self.elastic, router.host_time,
                          time.monotonic)
        self.dispatcher = Dispatcher(verbs, library, supervisor.processes.awaits_pid)
        slow = SlowWatch(self.status.slow_members,
                         View(lambda: supervisor.worlds, lambda w: list(w.plan.members)),
                         router.tell, self.history.slow)  # told as it changes
        self.rounds = Rounds(self.timers, agents.tick, self.ops, supervisor.plain,
                             stores.plain_ranks,
                             self.history, self.status, self.traffic, self.writer,
                             self.postmortems, slow)
        self.scrapes: Scrapes | None = None
        if plan.metrics is not None:  # prometheus_client, only for a job that serves it
            from mwrun.head.observe import metrics
            from mwrun.head.serve.scrapes import Scrapes

            self.scrapes = Scrapes(self.selector, metrics.Source(
                self.status.build, self.traffic.counts, lambda: supervisor.procs,
                lambda: self.rounds.lag, lambda: self.history.bundles,
                lambda: self.ops.begun, self.downtimes,
                self.traffic.times.histograms).families)

    @property
    def plan(self) -> Plan:
        """The plan as it is now: the launch plan, or its latest revision."""
        return self.membership.plan

    def _fault_closed(self, record: dict) -> None:
        self.history.fault(record)
        self.downtimes.fault(record)
        self.postmortems.fault(record)  # beside its bundle, if it has one

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
        ends = Ends(self.postmortems, self.scrapes, self.agents, self.supervisor, self.writer,
                    self.history, self.stores, self.selector, self.control_path)
        if self.scrapes is not None and self.plan.metrics is not None:
            self.scrapes.start(self.plan.metrics)  # before any process starts
        if self.taken is None:
            self.agents.attach()
        wakeups.install()
        try:
            for name in self.plan.processes:  # every zygote at once: imports side by side
                self.router.prepare(name)
            if self.taken is None:
                # The keeper: its agent's zygote's first fork, if it is warm.
                self.stores.start(lambda **asked: self.agents.keeper(self.plan.store_host,
                                                                     asked))
                self.supervisor.start()
            else:  # adopted: what runs is taken as it is, then what its agents kept heard
                for name, seen in self.taken.found.items():
                    if name in self.plan.processes or name in self.taken.retiring:
                        self.router.adopt(name, seen.pid, seen.warm, seen.host)
                self.supervisor.start(self.taken)
                self.agents.attach()
            self.stores.serve(wakeups.wake)
            self.writer.save()
            while not self.supervisor.finished:
                self._step()
        except StaleHead as exc:
            wakeups.restore()
            if exc.handed:  # links and the keeper's stay open until the new head has them
                epochs.await_successor(self.run_dir, self.fence.epoch)
            ends.stale(listener, wakeups)
            raise
        except BaseException:
            wakeups.restore()
            ends.finish(listener, wakeups)
            raise
        wakeups.restore()
        ends.finish(listener, wakeups)
        return self.supervisor.exit_code

    def _step(self) -> None:
        self.fence.check()
        due = self.timers.earliest()  # never None: TICK is always set
        wait = 0.0 if self.clients.backlog or due is None else max(due - time.monotonic(), 0.0)
        if self.agents.unsent():  # a link's pipe was full: the rest goes when it drains
            wait = min(wait, UNSENT_LOOK)
        ready = self.selector.select(wait)
        self.fence.check()  # a head stopped while another adopted its run wakes here
        for key, _ in ready:
            callback, arg = key.data
            callback(arg)  # each link's read is bounded (remote.READ_SLICE)
        self.clients.serve_backlog()
        self.agents.handle_pending()  # frames read while awaiting an answer
        try:
            self.stores.ready()
        except RunError as exc:  # the keeper failed or ended: the job cannot go on
            self.supervisor.fail(str(exc))
        for name in self.postmortems.step():  # captured: a hung member's kill goes now
            self.supervisor.beats.kill_hung(name)
        self.timers.fire(time.monotonic())
        self.writer.save()
        self.rounds.behind()
