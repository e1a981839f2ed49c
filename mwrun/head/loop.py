"""The supervisor's hands and its one loop.

``Loop`` is the ``host`` the Supervisor acts through: it spawns and signals
children, writes the stores, prints. Its ``run()`` is a single-threaded select loop
over every child's exit descriptor (a pidfd: an exit is seen the moment it happens,
not at the next poll), every child's output pipe, the control socket, and the signal
wakeup pipe; between events it sleeps until the supervisor's next deadline.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

from mwrun.errors import StartError
from mwrun.head import control, document
from mwrun.head.console import Printer
from mwrun.head.history import SAMPLE_EVERY, History
from mwrun.head.supervisor import TICK, Supervisor
from mwrun.head.traffic import Traffic
from mwrun.host import sockets
from mwrun.host.lines import LineBuffer
from mwrun.host.process import ProcessHandle
from mwrun.host.warm import reap_orphans
from mwrun.host.warmstarts import WarmStarts
from mwrun.plan import environment, preload
from mwrun.schema import WorldState

OUTPUT_PER_TURN = 64 * 1024  # bytes of children's output handled in one turn, shared
OUTPUT_SLICE_MIN = 4096
EXIT_DRAIN = 256 * 1024  # what is read of a child's pipe before its exit is reported
FINISH_WAIT = 2.0  # at the very end, for the last exits and output after SIGKILL
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Loop:
    def __init__(self, plan, run_id: str, run_dir, stores, printer: Printer, grace: float,
                 control_path: str, agents=None, hosts: list | None = None):
        self.plan = plan
        self.run_id = run_id
        self.run_dir = run_dir
        self.stores = stores
        self.printer = printer
        self.control_path = control_path
        self.started_at = time.time()
        self.handles: dict[str, ProcessHandle] = {}
        self.lines: dict[int, tuple[str, ProcessHandle, LineBuffer]] = {}  # by output fd
        self.usage: dict[str, tuple] = {}
        self.usage_at = 0.0
        self.selector = selectors.DefaultSelector()
        self.clients = control.Clients(self.selector, lambda line: control.serve(self, line))
        self.signals: list[int] = []
        self.saved: tuple | None = None  # what state.json last showed (document.save)
        self.observed: tuple | None = None  # what the history last saw
        self.saved_at = 0.0
        self.save_due: float | None = None  # a write of state.json held back until then
        self.next_tick = 0.0
        self.next_sample = 0.0
        self.traffic = Traffic()
        self.history = History(run_dir, {"run_id": run_id, "name": plan.name, "worlds": {
            n: list(w.members) for n, w in plan.worlds.items()}})
        self.agents = agents  # head.agents.Agents: the remote hosts' hands, if any
        self.hosts = hosts or []  # the status document's host entries (name, addr)
        self.supervisor = Supervisor(plan, self, grace)
        self.up = True  # every world formed once (said once while the job comes up)
        self.starts: dict[str, str] = {}  # process -> "warm" | "cold", as last started
        self.warm = WarmStarts(run_dir / "zygote.log", self.selector, self.say,
                               self._tell_watchdog, lambda: self.supervisor.stopping)
        self.watchdog = subprocess.Popen([sys.executable, "-m", "mwrun.host.watchdog"],
                                         stdin=subprocess.PIPE, text=True,
                                         start_new_session=True)

    # -- the host interface the Supervisor uses ------------------------------------------

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def spawn(self, name: str, generations: dict, restarts: int) -> int | None:
        proc = self.plan.processes[name]
        if self.agents is not None and proc.host in self.agents.hosts():
            return self._spawn_remote(name, generations, restarts)
        env = self._env(name, generations, restarts)
        # A start whose zygote still imports is held (in order) while the loop serves
        # on: the head must keep beating to its agents and answering status meanwhile.
        if self.warm.holds(proc.preload, self._how(name), env, proc.cwd,
                           lambda: self._resume(name, env)):
            return None  # the supervisor hears of it with on_spawned
        return self._start(name, env)

    def _how(self, name: str):
        cmd = self.plan.processes[name].cmd
        return preload.target(cmd, cmd[0])

    def _resume(self, name: str, env: dict) -> None:
        """A start held for its zygote: made now, or failed."""
        try:
            if self.supervisor.stopping:
                raise StartError("not started: the job is stopping")
            self.supervisor.on_spawned(name, self._start(name, env))
        except StartError as exc:
            self.supervisor.on_spawn_failed(name, str(exc))

    def _start(self, name: str, env: dict) -> int:
        proc = self.plan.processes[name]
        handle = self.warm.spawn(proc.cmd, proc.preload, self._how(name), env, proc.cwd,
                                 proc.cpus)
        self.starts[name] = "cold" if handle is None else "warm"
        if handle is None:
            handle = ProcessHandle.spawn(proc.cmd, env, proc.cwd, proc.cpus, proc.netns)
        self._tell_watchdog(f"+{handle.pid}")
        self.handles[name] = handle
        self.lines[handle.output_fd] = (name, handle, LineBuffer())
        self.selector.register(handle.exit_fd, selectors.EVENT_READ, (self._exited, name))
        self.selector.register(handle.output_fd, selectors.EVENT_READ,
                               (self._drain, handle.output_fd))
        return handle.pid

    def _env(self, name: str, generations: dict, restarts: int) -> dict:
        return environment.process_env(self.plan, name, os.environ, run_id=self.run_id,
                                       control=self.control_path, generations=generations,
                                       restart_count=restarts)

    def _started(self) -> None:
        """Progress while the job comes up: what started how, then (in _step) when
        every world has formed."""
        warm_count = sum(1 for how in self.starts.values() if how == "warm")
        self.say(f"{len(self.starts)} processes started in {time.time() - self.started_at:.1f}s"
                 f" ({warm_count} warm, {len(self.starts) - warm_count} cold);"
                 f" waiting for {len(self.plan.worlds)} world(s) to form")
        self.up = False

    def _announce_up(self) -> None:
        if not self.up and all(w.state is WorldState.HEALTHY
                               for w in self.supervisor.worlds.values()):
            self.up = True
            self.say(f"every world formed, {time.time() - self.started_at:.1f}s after launch")

    def _spawn_remote(self, name: str, generations: dict, restarts: int) -> None:
        """Asked of its host's agent; the answer comes as remote_spawned or
        remote_failed (the loop never waits for a host)."""
        self.handles[name] = self.agents.start(name, generations, restarts)
        self.starts.pop(name, None)

    def _prepare_warm(self) -> None:
        """Every zygote the job needs, started at once (here, or by its host's agent), so
        their imports run side by side."""
        for name, proc in self.plan.processes.items():
            generations = dict.fromkeys(proc.worlds, 0)
            if self.agents is not None and proc.host in self.agents.hosts():
                self.agents.prepare(name, generations)
            elif proc.preload:
                self.warm.prepare(proc.preload, self._env(name, generations, 0))

    def reachable(self, name: str) -> bool:
        """Whether the process's host can start it now (a lost host cannot)."""
        host = self.plan.processes[name].host
        return self.agents is None or host not in self.agents.hosts() or self.agents.up(host)

    def remote_spawned(self, name: str, pid: int, warm: bool) -> None:
        self.starts[name] = "warm" if warm else "cold"
        self.supervisor.on_spawned(name, pid)

    def remote_failed(self, name: str, error: str) -> None:
        self.supervisor.on_spawn_failed(name, error)

    def remote_exited(self, name: str, code: int) -> None:
        self.supervisor.on_exit(name, code)

    def remote_lost(self, name: str, reason: str) -> None:
        self.supervisor.on_exit(name, None, lost=reason)

    def signal(self, name: str, sig: int) -> None:
        handle = self.handles.get(name)
        if handle is not None:
            handle.signal(sig)
            rec = self.supervisor.procs[name]
            why = "stop" if self.supervisor.stopping else \
                "hang" if rec.hung is not None else "drill"
            self.history.signalled(name, sig, why)

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        self.stores.mark_broken(world, generation, reason)

    def open_next(self, world: str, generation: int) -> None:
        self.stores.open_next(world, generation)

    def close_world(self, world: str, generation: int, reason: str) -> None:
        self.stores.close_world(world, generation, reason)

    def say(self, text: str) -> None:
        self.printer.event(text)

    def probe(self, name: str) -> str | None:
        handle = self.handles.get(name)
        return handle.status() if handle is not None else None

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
            self.agents.attach(self.selector)
        old_wakeup = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        old_handlers = {s: signal.signal(s, self._record_signal) for s in STOP_SIGNALS}
        try:
            self._prepare_warm()
            self.supervisor.start()
            self._started()
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
            if callback == self._drain:
                output.append(arg)
            else:
                callback(arg)  # exits, signals, control: before any output
        # Output in a bounded slice per child per turn: a child printing faster than
        # the loop can show it must not keep exits, timers and requests waiting.
        share = max(OUTPUT_PER_TURN // max(len(output), 1), OUTPUT_SLICE_MIN)
        for fd in output:
            self._drain(fd, share)
        self.clients.serve_backlog()
        if self.agents is not None:
            self.agents.handle_pending()  # frames read while awaiting an answer
        self.stores.ready()  # what waited for the stores is written once they exist
        now = time.monotonic()
        if now >= due:
            if self.agents is not None:
                self.agents.tick(now)
            known = {h.pid for h in self.handles.values()} | self.warm.pids()
            reap_orphans(known | {self.watchdog.pid})
            self.supervisor.on_tick()
            if now >= self.next_tick:
                self.next_tick = now + TICK
                self._look_into_stores()
            if now >= self.next_sample:
                self.next_sample = now + SAMPLE_EVERY
                self.history.sample(document.rates(self, now, SAMPLE_EVERY))
        self._announce_up()
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

    def _exited(self, name: str) -> None:
        handle = self.handles[name]
        code = handle.returncode()
        if code is None:
            return  # the fallback notifier can run a moment ahead of the reaping
        # Its group may outlive it (a grandchild that ignores SIGTERM, a daemon it
        # forked): nothing of a process outlives the process itself.
        handle.signal(signal.SIGKILL)
        self._drain(handle.output_fd, EXIT_DRAIN)  # its last words before its exit
        self.selector.unregister(handle.exit_fd)
        handle.close_exit()
        self._tell_watchdog(f"-{handle.pid}")
        self.supervisor.on_exit(name, code)

    def _drain(self, fd: int, limit: int) -> None:
        """Read up to ``limit`` bytes of a child's output (what is there; never waits)."""
        entry = self.lines.get(fd)
        if entry is None:
            return
        name, handle, buffer = entry
        while limit > 0:
            try:
                data = os.read(fd, min(limit, 65536))
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # EOF: every writer (grandchildren too) has closed it
                self.printer.lines(name, buffer.flush())
                self.selector.unregister(fd)
                del self.lines[fd]
                handle.close_output()
                return
            limit -= len(data)
            self.printer.lines(name, buffer.feed(data))

    def _tell_watchdog(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.watchdog.stdin.write(line + "\n")
            self.watchdog.stdin.flush()

    def _finish(self, listener, wake_read, wake_write) -> None:
        """Leave nothing behind, and never wait without limit: SIGKILL every group
        (whatever became of its leader), then wait at most FINISH_WAIT for the last
        exits and the last output (a process stuck in the kernel dies when it can).
        Agents told to stop kill what they still run."""
        if self.agents is not None:
            self.agents.close()
        local = {}
        for name, handle in self.handles.items():
            if getattr(handle, "remote", False):
                code = handle.returncode()
                self.supervisor.on_exit(name, -signal.SIGKILL if code is None else code)
            else:
                local[name] = handle
        for handle in local.values():
            handle.signal(signal.SIGKILL)
        deadline = time.monotonic() + FINISH_WAIT
        for name, handle in local.items():
            code = handle.wait(max(deadline - time.monotonic(), 0.0))
            if code is not None:
                self.supervisor.on_exit(name, code)  # only after an exception in the loop
        self._drain_to_end(deadline)
        self._save(force=True)  # the final state, never held back
        self.history.close()
        self.warm.close()
        self._tell_watchdog("exit")
        with contextlib.suppress(OSError):
            self.watchdog.stdin.close()
        try:
            self.watchdog.wait(timeout=FINISH_WAIT)
        except subprocess.TimeoutExpired:
            self.watchdog.kill()
        for sock in (listener, wake_read, wake_write):
            sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.control_path)
        self.selector.close()
        self.stores.close()

    def _drain_to_end(self, deadline: float) -> None:
        """The output still in the pipes, until their end or the deadline (a process
        that left its group may hold a pipe open for ever)."""
        with selectors.DefaultSelector() as pipes:
            for fd in self.lines:
                pipes.register(fd, selectors.EVENT_READ)
            while self.lines and time.monotonic() < deadline:
                for key, _ in pipes.select(max(deadline - time.monotonic(), 0.0)):
                    self._drain(key.fd, OUTPUT_PER_TURN)
                    if key.fd not in self.lines:  # its end: closed by _drain
                        pipes.unregister(key.fd)
        for name, handle, buffer in self.lines.values():
            self.printer.lines(name, buffer.flush())
            self.selector.unregister(handle.output_fd)
            handle.close_output()
        self.lines.clear()

    # -- the status document (head/document.py) -------------------------------------------

    def document(self, fresh_usage: bool = False) -> dict:
        return document.build(self, fresh_usage)

    def _save(self, force: bool = False) -> None:
        document.save(self, force)
