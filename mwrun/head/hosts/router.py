"""From a process to the hands of its host: what the supervisor acts through
(``supervisor.Host``). A start is built from the plan as it is now (the launch plan,
or its latest revision: ``plan()``) and handed to its host's agent (``Agents``: the
head's own machine has one too); a signal, a probe, a usage reading, a time told on
its host's clock go to the agent that started the process (a retired replica has left
the plan, not its host). The worlds' stores are written through ``stores``; a process's library is
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


class Hands(Protocol):
    """Every host's hands: their agents (``head.agents.Agents``), the head's own
    machine's included. Nothing here waits for a host: a start returns at once and is
    told to the loop as ``spawned``/``failed``; a status or usage is what the host
    last said."""

    def prepare(self, spec: LaunchSpec) -> None: ...
    def start(self, spec: LaunchSpec) -> None: ...
    def signal(self, name: str, sig: int) -> None: ...
    def status(self, name: str) -> str | None: ...
    def usage(self, name: str) -> tuple[float | None, int | None]: ...
    def hosts(self) -> set[str]: ...
    def up(self, host: str) -> bool: ...
    def control_path(self, host: str) -> str: ...
    def to_head(self, host: str, t) -> float | None: ...
    def capture(self, name: str, key: str, pid: int, native: bool, within: float) -> str | None: ...
    def stopping(self) -> None: ...
    def adopt(self, name: str, pid: int | None, warm: bool, host: str) -> None: ...


class Router:
    def __init__(self, plan: Callable[[], Plan], agents: Hands, stores: Stores,
                 downlink: Downlink, run_id: str):
        self.plan, self.agents, self.stores = plan, agents, stores
        self.downlink, self.run_id = downlink, run_id
        # process -> the host it was last started on (how, and its pid, are its Worker's)
        self.host_of: dict[str, str] = {}

    # -- time ----------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def host_time(self, name: str, t: float) -> float:
        """A time process ``name`` told on its host's wall clock, on the head's (the
        offset to its host's agent, clocks.py)."""
        host = self.host_of.get(name)
        if host in self.agents.hosts():
            return self.agents.to_head(host, t) or float(t)
        return float(t)

    # -- processes ---------------------------------------------------------------------

    def capture(self, name: str, key: str, pid: int, native: bool, within: float) -> str | None:
        """Read a process's stacks from outside, by its host's agent (host/spy.py)."""
        return self.agents.capture(name, key, pid, native, within)

    def spec(self, name: str, generations: dict, restarts: int,
             incarnation: int = protocol.FIRST_INCARNATION) -> LaunchSpec:
        plan = self.plan()
        control = self.agents.control_path(plan.processes[name].host)
        return environment.launch_spec(plan, name, run_id=self.run_id, control=control,
                                       generations=generations, restart_count=restarts,
                                       incarnation=incarnation)

    def spawn(self, name: str, generations: dict, restarts: int, incarnation: int) -> Made:
        """Asked of its host's agent: its pid and how it was made come later (the
        supervisor hears of them with on_spawned)."""
        self.host_of[name] = self.plan().processes[name].host
        self.downlink.started(name)
        self.agents.start(self.spec(name, generations, restarts, incarnation))
        return Made(None, None)

    def adopt(self, name: str, pid: int | None, warm: bool, host: str) -> None:
        """A start the agent of ``host`` runs already (or is making: ``pid`` None),
        taken by a new head (``mwrun adopt``): routed as though this head had made it
        (one that was retired, too: it is in no plan now)."""
        self.host_of[name] = host
        self.downlink.started(name)
        self.agents.adopt(name, pid, warm, host)

    def prepare(self, name: str) -> None:
        """The zygote that process ``name`` will be forked from, started now."""
        proc = self.plan().processes[name]
        if proc.preload:
            self.agents.prepare(self.spec(name, dict.fromkeys(proc.worlds, 0), 0))

    def reachable(self, name: str) -> bool:
        """Whether the process's host can start it now (a lost host cannot)."""
        return self.host_up(self.plan().processes[name].host)

    def host_up(self, host: str) -> bool:
        return host not in self.agents.hosts() or self.agents.up(host)

    def signal(self, name: str, sig: int, why: Why) -> None:
        """Why is the supervisor's to tell (its Signalled event); the hands only send."""
        self.agents.signal(name, sig)

    def probe(self, name: str) -> str | None:
        return self.agents.status(name)

    def usage_of(self, name: str) -> tuple[float | None, int | None]:
        return self.agents.usage(name)

    def tell(self, process: str, message: dict) -> None:
        self.downlink.tell(process, message)

    def stopping(self) -> None:
        """The job is stopping: the agents start nothing more."""
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
