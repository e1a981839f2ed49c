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

from mwrun.head import control, rundir
from mwrun.head.console import Printer
from mwrun.head.supervisor import TICK, Supervisor
from mwrun.host.lines import LineBuffer
from mwrun.host.process import ProcessHandle
from mwrun.plan import environment

USAGE_EVERY = 10.0  # seconds between cpu/memory readings for state.json
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
        self.signals: list[int] = []
        self.saved: tuple | None = None
        self.next_tick = 0.0
        self.agents = agents  # head.agents.Agents: the remote hosts' hands, if any
        self.hosts = hosts or []  # the status document's host entries (name, addr)
        self.supervisor = Supervisor(plan, self, grace)
        self.watchdog = subprocess.Popen([sys.executable, "-m", "mwrun.host.watchdog"],
                                         stdin=subprocess.PIPE, text=True,
                                         start_new_session=True)

    # -- the host interface the Supervisor uses ------------------------------------------

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def spawn(self, name: str, generations: dict, restarts: int) -> int:
        proc = self.plan.processes[name]
        if self.agents is not None and proc.host in self.agents.hosts():
            return self._spawn_remote(name, generations, restarts)
        env = environment.process_env(self.plan, name, os.environ, run_id=self.run_id,
                                      control=self.control_path, generations=generations,
                                      restart_count=restarts)
        handle = ProcessHandle.spawn(proc.cmd, env, proc.cwd, proc.cpus, proc.netns)
        self._tell_watchdog(f"+{handle.pid}")
        self.handles[name] = handle
        self.lines[handle.output_fd] = (name, handle, LineBuffer())
        self.selector.register(handle.exit_fd, selectors.EVENT_READ, (self._exited, name))
        self.selector.register(handle.output_fd, selectors.EVENT_READ,
                               (self._drain, handle.output_fd))
        return handle.pid

    def _spawn_remote(self, name: str, generations: dict, restarts: int) -> int:
        """The same process, started by its host's agent: the environment is ours
        over the remote host's own (its PATH, HOME), not the head's."""
        proc = self.plan.processes[name]
        link = self.agents.links[proc.host]
        control_path = link.hello["control"] if link.hello else ""
        env = environment.process_env(self.plan, name, {}, run_id=self.run_id,
                                      control=control_path, generations=generations,
                                      restart_count=restarts)
        handle = self.agents.spawn(proc.host, name, proc.cmd, env, proc.cwd, proc.cpus,
                                   environment.OWNED + environment.OWNED_MWRUN,
                                   environment.OWNED_PREFIXES)
        self.handles[name] = handle
        return handle.pid

    def reachable(self, name: str) -> bool:
        """Whether the process's host can start it now (a lost host cannot)."""
        host = self.plan.processes[name].host
        return self.agents is None or host not in self.agents.hosts() or self.agents.up(host)

    def remote_exited(self, name: str, code: int) -> None:
        self.supervisor.on_exit(name, code)

    def remote_lost(self, name: str, reason: str) -> None:
        self.supervisor.on_lost(name, reason)

    def signal(self, name: str, sig: int) -> None:
        handle = self.handles.get(name)
        if handle is not None:
            handle.signal(sig)

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
        listener = control.listen(self.control_path)
        self.selector.register(listener, selectors.EVENT_READ, (self._accept, listener))
        wake_read, wake_write = socket.socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)
        self.selector.register(wake_read, selectors.EVENT_READ, (self._signalled, wake_read))
        if self.agents is not None:
            self.agents.attach(self.selector)
        old_wakeup = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        old_handlers = {s: signal.signal(s, self._record_signal) for s in STOP_SIGNALS}
        try:
            self.supervisor.start()
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
        deadline = self.supervisor.deadline()
        if deadline is not None:
            due = min(due, deadline)
        for key, _ in self.selector.select(max(due - time.monotonic(), 0.0)):
            callback, arg = key.data
            callback(arg)
        if self.agents is not None:
            self.agents.handle_pending()  # frames read while awaiting an answer
        now = time.monotonic()
        if now >= due:
            if self.agents is not None:
                self.agents.tick(now)
            self.supervisor.on_tick()
            if now >= self.next_tick:
                self.next_tick = now + TICK
        self._save()

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
        self._drain(handle.output_fd)  # the last words before the exit is reported
        self.selector.unregister(handle.exit_fd)
        handle.close_exit()
        self._tell_watchdog(f"-{handle.pid}")
        self.supervisor.on_exit(name, code)

    def _drain(self, fd: int) -> None:
        entry = self.lines.get(fd)
        if entry is None:
            return
        name, handle, buffer = entry
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # EOF: every writer (grandchildren too) has closed it
                for line in buffer.flush():
                    self.printer.line(name, line)
                self.selector.unregister(fd)
                del self.lines[fd]
                handle.close_output()
                return
            for line in buffer.feed(data):
                self.printer.line(name, line)

    def _accept(self, listener: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            sock, _ = listener.accept()
            if not control.same_user(sock):
                sock.close()
                return
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ,
                                   (self._request, control.Connection(sock)))

    def _request(self, connection: control.Connection) -> None:
        requests = connection.read_lines()
        if requests is None:
            self.selector.unregister(connection.sock)
            connection.close()
            return
        for request in requests:
            reply = control.dispatch(self, request)
            if reply is not None:
                connection.reply(reply)

    def _tell_watchdog(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.watchdog.stdin.write(line + "\n")
            self.watchdog.stdin.flush()

    def _finish(self, listener, wake_read, wake_write) -> None:
        for fd in list(self.lines):
            self._drain(fd)  # what is there now; a grandchild may hold a pipe open for ever
        for name, handle, buffer in self.lines.values():
            for line in buffer.flush():
                self.printer.line(name, line)
            self.selector.unregister(handle.output_fd)
            handle.close_output()
        self.lines.clear()
        if self.agents is not None:
            self.agents.close()  # an agent told to stop kills what it still runs
        for name, handle in self.handles.items():
            if not hasattr(handle, "popen"):  # remote: its agent has ended it
                code = handle.returncode()
                self.supervisor.on_exit(name, -signal.SIGKILL if code is None else code)
                continue
            if handle.returncode() is None:  # only after an exception in the loop
                handle.signal(signal.SIGKILL)
                handle.popen.wait()
            self.supervisor.on_exit(name, handle.popen.returncode)
        self._save()
        self._tell_watchdog("exit")
        with contextlib.suppress(OSError):
            self.watchdog.stdin.close()
        self.watchdog.wait()
        for sock in (listener, wake_read, wake_write):
            sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.control_path)
        self.selector.close()
        self.stores.close()

    # -- the status document -------------------------------------------------------------

    def document(self, fresh_usage: bool = False) -> dict:
        sup = self.supervisor
        now = time.monotonic()
        if fresh_usage or now - self.usage_at >= USAGE_EVERY:
            self.usage_at = now
            if self.agents is not None:
                self.agents.refresh_usage()  # answers arrive for the next document
            self.usage = {name: self.handles[name].usage() for name, rec in sup.procs.items()
                          if rec.state.alive and name in self.handles}
        processes = []
        for name, rec in sup.procs.items():
            cpu, rss = self.usage.get(name, (None, None)) if rec.state.alive else (None, None)
            processes.append({
                "name": name, "host": rec.plan.host, "pid": rec.pid, "state": rec.state.value,
                "exit_code": rec.exit_code, "restarts": rec.restarts,
                "worlds": dict(rec.plan.worlds),
                "gpus": [int(g) if g.isdigit() else g for g in rec.plan.gpus],
                "cpus": list(rec.plan.cpus) if rec.plan.cpus is not None else [],
                "started_at": rec.started_at, "cpu_percent": cpu, "rss_bytes": rss,
                "last_event": rec.why or None})
        worlds = [{"name": name, "backend": w.plan.backend, "size": w.plan.size,
                   "members": list(w.plan.members), "generation": w.generation,
                   "state": w.state.value, "breaks": w.breaks, "port": w.plan.port,
                   "reason": w.reason} for name, w in sup.worlds.items()]
        return {"run_id": self.run_id, "name": self.plan.name, "state": sup.state.value,
                "supervisor_pid": os.getpid(), "started_at": self.started_at,
                "topology": str(self.run_dir / "topology.yaml"), "control": self.control_path,
                "exit_code": sup.exit_code if sup.finished else None,
                "processes": processes, "worlds": worlds, "hosts": self._hosts()}

    def _hosts(self) -> list[dict]:
        states = self.agents.states() if self.agents is not None else {}
        pids = self.agents.pids() if self.agents is not None else {}
        return [{"name": name, "addr": addr, "state": states.get(name, "local"),
                 "agent_pid": pids.get(name)} for name, addr in self.hosts]

    def _save(self) -> None:
        """Write state.json when a state changed (a heartbeat changes none) or the
        usage readings are due; building the document for every event would cost
        the supervisor more than everything else it does."""
        key = (self.supervisor.signature(), self.usage_at,
               tuple(sorted(self.agents.states().items())) if self.agents else ())
        if key == self.saved and time.monotonic() - self.usage_at < USAGE_EVERY:
            return
        doc = self.document()
        rundir.write_json(self.run_dir / "state.json", doc)
        self.saved = (key[0], self.usage_at, key[2])
