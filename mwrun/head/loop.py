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
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from mwrun.head import control, document
from mwrun.head.agents import Agents
from mwrun.head.console import Printer
from mwrun.head.downlink import Downlink
from mwrun.head.elastic import Elastic
from mwrun.head.events import Event, Events, Gone, Said, WorldFormed, lines
from mwrun.head.faults import Faults
from mwrun.head.history import SAMPLE_EVERY, History
from mwrun.head.router import Router
from mwrun.head.scaleops import Ops
from mwrun.head.supervisor import TICK, Supervisor
from mwrun.head.traffic import Traffic
from mwrun.host import sockets
from mwrun.host.hands import Hands
from mwrun.membership.revision import Membership
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import Plan
from mwrun.plan.topology import Topology
from mwrun.schema import STATE, ZYGOTE_LOG
from mwrun.terminal import count

OUTPUT_PER_TURN = 64 * 1024  # bytes of children's output handled in one turn, shared
OUTPUT_SLICE_MIN = 4096
FINISH_WAIT = 2.0  # at the very end, for the last exits and output after SIGKILL
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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
        self.usage: dict[str, tuple] = {}
        self.usage_at = 0.0
        self.selector = selectors.DefaultSelector()
        self.clients = control.Clients(self.selector, lambda line, connection: control.serve(
            self, line, connection))
        self.signals: list[int] = []
        self.next_tick = 0.0
        self.next_sample = 0.0
        self.traffic = Traffic()
        # What the job should be made of: the plan as launched, then each revision.
        self.membership = Membership(topology, plan, inventory, sys.executable,
                                     stores.choose_port)
        self.history = History(run_dir, {"run_id": run_id, "name": plan.name, "worlds": {
            n: list(w.members) for n, w in plan.worlds.items()}})
        # The remote hosts' hands (their agents), if any; this host's own are ``hands``.
        self.agents = Agents(links, self, reach, lambda n: self.plan.processes[n].host,
                             self.selector) if links else None
        self.downlink = Downlink(self.clients.push, self._tell_remote)
        self.hosts = hosts or []  # the status document's host entries (name, addr)
        self.writer = document.Writer(run_dir / STATE, lambda: document.build(self),
                                      lambda: document.outside(self))
        # The phases of every fault (after the history: a fault's record follows the
        # break that ended it), and of every scale operation's changes.
        self.faults = Faults(View(lambda: self.supervisor.procs, lambda r: list(r.plan.worlds)),
                             View(lambda: self.supervisor.worlds,
                                  lambda w: list(w.plan.members)),
                             lambda world: self.supervisor.worlds[world].generation,
                             self.history.fault, time.time)
        self.ops = Ops(self.history.scale, time.time, self.say)
        # Who hears it: the console and events.log, the history, the faults, the scale
        # operations, state.json (behind).
        self.events = Events((lines(printer.event), self.history, self.faults, self.ops,
                              self.writer, self._formed, self._gone))
        self.hands = Hands(self.selector, self, run_dir / ZYGOTE_LOG, lambda: self.stopping)
        self.router = Router(lambda: self.plan, self.hands, self.agents, stores,
                             self.downlink, run_id, control_path, self._started)
        self.supervisor = Supervisor(plan, self.router, self.events, grace)
        self.elastic = Elastic(self.membership, self.supervisor, self.ops,
                               self.router.host_up, run_dir)
        self.unformed = set(plan.worlds)  # worlds not formed yet since launch
        # Processes whose first start is not known yet: a warm start waits for its
        # zygote's imports, so the launch's progress line waits for the last of them.
        self.unstarted: set[str] | None = set(plan.processes)

    @property
    def plan(self) -> Plan:
        """The plan as it is now: the launch plan, or its latest revision."""
        return self.membership.plan

    @property
    def stopping(self) -> bool:
        return self.supervisor.stopping

    @property
    def starts(self) -> dict[str, str]:
        return self.router.starts

    def now(self) -> float:
        return time.monotonic()

    def host_time(self, name: str, t: float) -> float:
        return self.router.host_time(name, t)

    def wall(self) -> float:
        return time.time()

    def _tell_remote(self, process: str, message: dict) -> bool:
        return self.agents is not None and self.agents.tell(process, message)

    # -- what the hands (here, or a host's agent) tell: host.hands.Owner ------------------

    def spawned(self, name: str, pid: int, warm: bool, at: float | None = None) -> None:
        """``at``: when its host (a remote agent) made it, on the head's clock."""
        self.router.starts[name] = "warm" if warm else "cold"
        self.supervisor.on_spawned(name, pid, at)
        self._started(name)

    def failed(self, name: str, error: str) -> None:
        self.supervisor.on_spawn_failed(name, error)
        self._started(name)

    def lines(self, name: str, lines: list[str]) -> None:
        self.printer.lines(name, lines)

    def exited(self, name: str, code: int, at: float | None = None) -> None:
        """``at``: when its host (a remote agent) saw the exit, on the head's clock."""
        self.supervisor.on_exit(name, code, at=at)

    def lost(self, name: str, reason: str) -> None:
        self.supervisor.on_exit(name, None, lost=reason)

    def say(self, text: str) -> None:
        self.events.emit(Said(text))

    def _started(self, name: str) -> None:
        """Progress while the job comes up: what started how, said once the first start
        of every process is known, then (``_formed``) when every world has formed."""
        if self.unstarted is None:
            return
        self.unstarted.discard(name)
        if self.unstarted:
            return
        self.unstarted = None
        starts = self.router.starts
        warm_count = sum(1 for how in starts.values() if how == "warm")
        self.say(f"{count(len(starts), 'process', 'processes')} started in"
                 f" {time.time() - self.started_at:.1f}s"
                 f" ({warm_count} warm, {len(starts) - warm_count} cold);"
                 f" waiting for {count(len(self.plan.worlds), 'world')} to form")

    def _formed(self, event: Event) -> None:
        """Progress while the job comes up: said once every world has formed (a count
        kept as worlds form, never a look at every world after every event)."""
        if isinstance(event, WorldFormed) and event.world in self.unformed:
            self.unformed.discard(event.world)
            if not self.unformed:
                self.say(f"every world formed, {time.time() - self.started_at:.1f}s"
                         " after launch")

    def _gone(self, event: Event) -> None:
        """A retired replica exited: it leaves the job (its resources are free again)."""
        if isinstance(event, Gone):
            self.membership.gone(event.process)
            self.router.forget(event.process)
            self.usage.pop(event.process, None)

    def usage_of(self, name: str) -> tuple[float | None, int | None]:
        return self.router.usage_of(name)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        wanted = len(self.plan.processes) + 64  # each connects once, all at about once
        listener = control.listen(self.control_path, wanted)
        if sockets.somaxconn() < wanted:
            self.say(f"net.core.somaxconn is {sockets.somaxconn()}, below the {wanted}"
                     " connections this job may make at once; processes that find the"
                     " backlog full keep trying, so they are supervised a little later")
        self.selector.register(listener, selectors.EVENT_READ, (self.clients.accept, listener))
        wake_read, wake_write = socket.socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)
        self.selector.register(wake_read, selectors.EVENT_READ, (self._signalled, wake_read))
        if self.agents is not None:
            self.agents.attach()
        old_wakeup = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        old_handlers = {s: signal.signal(s, self._record_signal) for s in STOP_SIGNALS}
        try:
            for name in self.plan.processes:  # every zygote at once: imports side by side
                self.router.prepare(name)
            self.supervisor.start()
            self.stores.serve(lambda: self._wake(wake_write))
            self._save()
            while not self.supervisor.finished:
                self._step()
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            self._finish(listener, wake_read, wake_write)
        return self.supervisor.exit_code

    def _step(self) -> None:
        due = self.next_tick
        for deadline in (self.supervisor.deadline(), self.save_due):
            if deadline is not None:
                due = min(due, deadline)
        wait = 0.0 if self.clients.backlog else max(due - time.monotonic(), 0.0)
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
        now = time.monotonic()
        if now >= due:
            if self.agents is not None:
                self.agents.tick(now)
            self.hands.tick()
            self.supervisor.on_tick()
            self.ops.tick()
            if now >= self.next_tick:
                self.next_tick = now + TICK
                self._look_into_stores()
            if now >= self.next_sample:
                self.next_sample = now + SAMPLE_EVERY
                self.history.sample(document.rates(self, now, SAMPLE_EVERY),
                                    self.traffic.totals(now, time.time()))
        self._save()

    def _look_into_stores(self) -> None:
        for world in self.supervisor.plain_forming():
            self.supervisor.on_store_seen(world, self.stores.plain_ranks(world))

    @staticmethod
    def _wake(wake: socket.socket) -> None:
        with contextlib.suppress(OSError):
            wake.send(b"\0")  # from the stores' thread: they exist, write what waited

    def _record_signal(self, signum, frame) -> None:
        self.signals.append(signum)  # acted on by the loop, never in the handler

    def _signalled(self, wake: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            while wake.recv(4096):
                pass
        while self.signals:
            name = signal.Signals(self.signals.pop(0)).name
            self.supervisor.request_stop(f"{name} received")

    def _finish(self, listener, wake_read, wake_write) -> None:
        """Leave nothing behind, and never wait without limit: every host's hands
        SIGKILL what they still run (agents told to stop do it on theirs), this host's
        wait at most FINISH_WAIT for the last exits and the last output (a process
        stuck in the kernel dies when it can)."""
        deadline = time.monotonic() + FINISH_WAIT
        codes = self.agents.close() if self.agents is not None else {}
        codes.update(self.hands.close(deadline))
        for name, code in codes.items():
            self.supervisor.on_exit(name, code)  # only after an exception in the loop
        self._save(force=True)  # the final state, never held back
        self.history.close()
        for sock in (listener, wake_read, wake_write):
            sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.control_path)
        self.selector.close()
        self.stores.close()

    # -- the status document (head/document.py) -------------------------------------------

    def document(self, fresh_usage: bool = False) -> dict:
        return document.build(self, fresh_usage)

    save_due = property(lambda self: self.writer.due)  # a write held back (document.Writer)

    def _save(self, force: bool = False) -> None:
        self.writer.save(force)
