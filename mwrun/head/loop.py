"""The head's one loop: what the supervisor acts through, and what tells it.

``Loop`` is the ``host`` the Supervisor acts through: it starts and signals processes
through the hands of their host (``host.hands.Hands`` for this machine, ``Agents`` for
the others: one ``HostHands`` face), writes the stores, prints; and it is those hands'
``Owner``: what they tell (spawned, lines, exited, lost) goes to the supervisor and the
console. Its ``run()`` is a single-threaded select loop over every child's exit
descriptor (a pidfd: an exit is seen the moment it happens, not at the next poll), every
child's output pipe, the agents' links, the control socket, and the signal wakeup pipe;
between events it sleeps until the supervisor's next deadline.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import time
from typing import Protocol

from mwrun import protocol
from mwrun.head import control, document
from mwrun.head.agents import Agents
from mwrun.head.console import Printer
from mwrun.head.events import Event, Events, Said, Why, WorldFormed, lines
from mwrun.head.faults import Faults
from mwrun.head.history import SAMPLE_EVERY, History
from mwrun.head.supervisor import TICK, Supervisor
from mwrun.head.traffic import Traffic
from mwrun.host import sockets
from mwrun.host.hands import Hands
from mwrun.launchspec import LaunchSpec
from mwrun.plan import environment
from mwrun.schema import STATE, ZYGOTE_LOG
from mwrun.terminal import count

OUTPUT_PER_TURN = 64 * 1024  # bytes of children's output handled in one turn, shared
OUTPUT_SLICE_MIN = 4096
FINISH_WAIT = 2.0  # at the very end, for the last exits and output after SIGKILL
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class HostHands(Protocol):
    """Where the head meets a host: this host's ``host.hands.Hands``, or the remote
    hosts' agents (``head.agents.Agents``). Nothing here waits for a host: a start the
    host answers later returns None and is told to the loop as ``spawned``/``failed``;
    a status or usage is what the host last said."""

    def prepare(self, spec: LaunchSpec) -> None: ...
    def start(self, spec: LaunchSpec) -> int | None: ...
    def signal(self, name: str, sig: int) -> None: ...
    def status(self, name: str) -> str | None: ...
    def usage(self, name: str) -> tuple[float | None, int | None]: ...


class Loop:
    def __init__(self, plan, run_id: str, run_dir, stores, printer: Printer, grace: float,
                 control_path: str, links: dict | None = None, reach=None,
                 hosts: list | None = None):
        self.plan = plan
        self.run_id = run_id
        self.run_dir = run_dir
        self.stores = stores
        self.printer = printer
        self.control_path = control_path
        self.started_at = time.time()
        self.usage: dict[str, tuple] = {}
        self.usage_at = 0.0
        self.selector = selectors.DefaultSelector()
        self.clients = control.Clients(self.selector, lambda line: control.serve(self, line))
        self.signals: list[int] = []
        self.next_tick = 0.0
        self.next_sample = 0.0
        self.traffic = Traffic()
        self.history = History(run_dir, {"run_id": run_id, "name": plan.name, "worlds": {
            n: list(w.members) for n, w in plan.worlds.items()}})
        # The remote hosts' hands (their agents), if any; this host's own are ``hands``.
        self.agents = Agents(links, self, reach, {n: p.host for n, p in plan.processes.items()},
                             self.selector) if links else None
        self.hosts = hosts or []  # the status document's host entries (name, addr)
        self.writer = document.Writer(run_dir / STATE, lambda: document.build(self),
                                      lambda: document.outside(self))
        # The phases of every fault (after the history: a fault's record follows the
        # break that ended it).
        self.faults = Faults({n: list(p.worlds) for n, p in plan.processes.items()},
                             {n: list(w.members) for n, w in plan.worlds.items()},
                             lambda world: self.supervisor.worlds[world].generation,
                             self.history.fault, time.time)
        # Who hears it: the console and events.log, the history, the faults, state.json
        # (behind).
        self.events = Events((lines(printer.event), self.history, self.faults, self.writer,
                              self._formed))
        self.supervisor = Supervisor(plan, self, self.events, grace)
        self.unformed = set(plan.worlds)  # worlds not formed yet since launch
        self.starts: dict[str, str] = {}  # process -> "warm" | "cold", as last started
        # Processes whose first start is not known yet: a warm start waits for its
        # zygote's imports, so the launch's progress line waits for the last of them.
        self.unstarted: set[str] | None = set(plan.processes)
        self.hands = Hands(self.selector, self, run_dir / ZYGOTE_LOG,
                           lambda: self.supervisor.stopping)

    # -- the host interface the Supervisor uses ------------------------------------------

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def host_time(self, name: str, t: float) -> float:
        """A time process ``name`` told on its host's wall clock, on the head's (the
        offset to a remote host's agent, clocks.py; this host's as it is)."""
        host = self.plan.processes[name].host if name in self.plan.processes else None
        if self.agents is not None and host in self.agents.hosts():
            return self.agents.to_head(host, t) or float(t)
        return float(t)

    def _hands_of(self, name: str) -> HostHands:
        """Whoever starts and signals the process: this host's hands, or its agent."""
        if self.agents is not None and self.plan.processes[name].host in self.agents.hosts():
            return self.agents
        return self.hands

    def _spec(self, name: str, generations: dict, restarts: int,
              incarnation: int = protocol.FIRST_INCARNATION) -> LaunchSpec:
        host = self.plan.processes[name].host
        control = self.control_path
        if self.agents is not None and host in self.agents.hosts():
            control = self.agents.control_path(host)
        return environment.launch_spec(self.plan, name, run_id=self.run_id, control=control,
                                       generations=generations, restart_count=restarts,
                                       incarnation=incarnation)

    def spawn(self, name: str, generations: dict, restarts: int,
              incarnation: int) -> int | None:
        """Its pid; or None when its host answers later (a remote host, a zygote still
        importing): the supervisor then hears of it with on_spawned."""
        self.starts.pop(name, None)
        spec = self._spec(name, generations, restarts, incarnation)
        pid = self._hands_of(name).start(spec)
        if pid is not None:
            self.starts[name] = "warm" if self.hands.was_warm(name) else "cold"
            self._started(name)
        return pid

    # -- what the hands (here, or a host's agent) tell: host.hands.Owner ------------------

    def spawned(self, name: str, pid: int, warm: bool, at: float | None = None) -> None:
        """``at``: when its host (a remote agent) made it, on the head's clock."""
        self.starts[name] = "warm" if warm else "cold"
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
        warm_count = sum(1 for how in self.starts.values() if how == "warm")
        self.say(f"{count(len(self.starts), 'process', 'processes')} started in"
                 f" {time.time() - self.started_at:.1f}s"
                 f" ({warm_count} warm, {len(self.starts) - warm_count} cold);"
                 f" waiting for {count(len(self.plan.worlds), 'world')} to form")

    def _formed(self, event: Event) -> None:
        """Progress while the job comes up: said once every world has formed (a count
        kept as worlds form, never a look at every world after every event)."""
        if isinstance(event, WorldFormed) and event.world in self.unformed:
            self.unformed.discard(event.world)
            if not self.unformed:
                self.say(f"every world formed, {time.time() - self.started_at:.1f}s"
                         " after launch")

    def _prepare_warm(self) -> None:
        """Every zygote the job needs, started at once (here, or by its host's agent), so
        their imports run side by side."""
        for name, proc in self.plan.processes.items():
            if proc.preload:
                self._hands_of(name).prepare(self._spec(name, dict.fromkeys(proc.worlds, 0), 0))

    def reachable(self, name: str) -> bool:
        """Whether the process's host can start it now (a lost host cannot)."""
        host = self.plan.processes[name].host
        return self.agents is None or host not in self.agents.hosts() or self.agents.up(host)

    def signal(self, name: str, sig: int, why: Why) -> None:
        """Why is the supervisor's to tell (its Signalled event); the hands only send."""
        self._hands_of(name).signal(name, sig)

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        self.stores.mark_broken(world, generation, reason)

    def open_next(self, world: str, generation: int, incarnations: list[int]) -> None:
        self.stores.open_next(world, generation, incarnations)

    def close_world(self, world: str, generation: int, reason: str, ended: bool = False) -> None:
        self.stores.close_world(world, generation, reason, ended)

    def probe(self, name: str) -> str | None:
        return self._hands_of(name).status(name)

    def usage_of(self, name: str) -> tuple[float | None, int | None]:
        return self._hands_of(name).usage(name)

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
            self._prepare_warm()
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
