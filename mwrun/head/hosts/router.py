"""From a process to the hands of its host: what the supervisor acts through
(``supervisor.Host``). A start is built from the plan as it is now (the launch plan,
or its latest revision: ``plan()``), handed to this host's ``Hands`` or, for a remote
host, to ``Agents``; a signal, a probe, a usage reading, a time told on a remote clock
go to whichever hands started the process (a retired replica has left the plan, not
its host). The worlds' stores are written through ``stores``; a process's library is
told through the ``Downlink``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from mwrun import protocol
from mwrun.head.decide.events import Why
from mwrun.head.decide.processbook import Made
from mwrun.head.decide.worldbook import Stores  # the same seam: the worlds' stores
from mwrun.head.hosts.downlink import Downlink
from mwrun.launchspec import LaunchSpec
from mwrun.plan import environment
from mwrun.plan.placement import Plan, WorldPlan
from mwrun.schema import Start


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


class Local(HostHands, Protocol):
    """This host's hands (``host.hands.Hands``): they also know how a start was made."""

    def was_warm(self, name: str) -> bool | None: ...


class Remote(HostHands, Protocol):
    """The remote hosts' hands (``Agents``): which hosts, and what is theirs alone."""

    def hosts(self) -> set[str]: ...
    def up(self, host: str) -> bool: ...
    def control_path(self, host: str) -> str: ...
    def to_head(self, host: str, t) -> float | None: ...
    def capture(self, name: str, key: str, pid: int, native: bool, within: float) -> str | None: ...
    def stopping(self) -> None: ...


class Router:
    def __init__(self, plan: Callable[[], Plan], hands: Local, agents: Remote | None,
                 stores: Stores, downlink: Downlink, run_id: str, control_path: str):
        self.plan, self.hands, self.agents, self.stores = plan, hands, agents, stores
        self.downlink, self.run_id, self.control_path = downlink, run_id, control_path
        # process -> the host it was last started on (how, and its pid, are its Worker's)
        self.host_of: dict[str, str] = {}

    # -- time ----------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def host_time(self, name: str, t: float) -> float:
        """A time process ``name`` told on its host's wall clock, on the head's (the
        offset to a remote host's agent, clocks.py; this host's as it is)."""
        host = self.host_of.get(name)
        if self.agents is not None and host in self.agents.hosts():
            return self.agents.to_head(host, t) or float(t)
        return float(t)

    # -- processes ---------------------------------------------------------------------

    def remote(self, host: str | None) -> bool:
        """Whether ``host`` is reached through an agent (not this machine)."""
        return self.agents is not None and host in self.agents.hosts()

    def capture(self, name: str, key: str, pid: int, native: bool, within: float) -> str | None:
        """Read a remote process's stacks from outside, by its host's agent (host/spy.py);
        this host's own are read by the head itself (postmortem.py)."""
        if self.agents is None:
            return "no agent on its host"
        return self.agents.capture(name, key, pid, native, within)

    def hands_of(self, name: str) -> HostHands:
        """Whoever starts and signals the process: this host's hands, or its agent."""
        host = self.host_of.get(name) or self.plan().processes[name].host
        return self.agents if self.agents is not None and self.remote(host) else self.hands

    def spec(self, name: str, generations: dict, restarts: int,
             incarnation: int = protocol.FIRST_INCARNATION) -> LaunchSpec:
        plan = self.plan()
        host = plan.processes[name].host
        control = self.agents.control_path(host) if self.agents is not None and \
            self.remote(host) else self.control_path
        return environment.launch_spec(plan, name, run_id=self.run_id, control=control,
                                       generations=generations, restart_count=restarts,
                                       incarnation=incarnation)

    def spawn(self, name: str, generations: dict, restarts: int, incarnation: int) -> Made:
        """Its pid and how it was made; or neither when its host answers later (a
        remote host, a zygote still importing): the supervisor then hears of it with
        on_spawned."""
        self.host_of[name] = self.plan().processes[name].host
        self.downlink.started(name)
        spec = self.spec(name, generations, restarts, incarnation)
        pid = self.hands_of(name).start(spec)
        if pid is None:
            return Made(None, None)
        return Made(pid, Start.WARM if self.hands.was_warm(name) else Start.COLD)

    def prepare(self, name: str) -> None:
        """The zygote that process ``name`` will be forked from, started now."""
        proc = self.plan().processes[name]
        if proc.preload:
            self.hands_of(name).prepare(self.spec(name, dict.fromkeys(proc.worlds, 0), 0))

    def reachable(self, name: str) -> bool:
        """Whether the process's host can start it now (a lost host cannot)."""
        return self.host_up(self.plan().processes[name].host)

    def host_up(self, host: str) -> bool:
        return self.agents is None or not self.remote(host) or self.agents.up(host)

    def signal(self, name: str, sig: int, why: Why) -> None:
        """Why is the supervisor's to tell (its Signalled event); the hands only send."""
        self.hands_of(name).signal(name, sig)

    def probe(self, name: str) -> str | None:
        return self.hands_of(name).status(name)

    def usage_of(self, name: str) -> tuple[float | None, int | None]:
        return self.hands_of(name).usage(name)

    def tell(self, process: str, message: dict) -> None:
        self.downlink.tell(process, message)

    def stopping(self) -> None:
        """The job is stopping: the agents start nothing more (this host's hands ask the
        supervisor themselves)."""
        if self.agents is not None:
            self.agents.stopping()

    def forget(self, name: str) -> None:
        """A process left the job (a retired replica that exited)."""
        self.host_of.pop(name, None)
        self.downlink.forget(name)

    # -- the worlds' stores ----------------------------------------------------------------

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        self.stores.mark_broken(world, generation, reason)

    def open_next(self, world: str, generation: int, incarnations: list[int]) -> None:
        self.stores.open_next(world, generation, incarnations)

    def close_world(self, world: str, generation: int, reason: str, ended: bool = False) -> None:
        self.stores.close_world(world, generation, reason, ended)

    def add_world(self, plan: WorldPlan, incarnations: list[int]) -> None:
        self.stores.add_world(plan, incarnations)

    def resize(self, world: str, generation: int, incarnations: list[int],
               members: list[str], reason: str) -> None:
        self.stores.resize(world, generation, incarnations, members, reason)

    def remove(self, world: str, generation: int, reason: str) -> None:
        self.stores.remove(world, generation, reason)
