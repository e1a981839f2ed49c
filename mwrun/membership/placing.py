"""Where a running job's new replicas go, and their new worlds' stores: placement as at
launch (plan/placement.py), from the pools a running job keeps (what every host has
free now: a retired replica's GPUs and CPUs are free again once it is gone) and a port
chooser that binds what it chooses (the head's stores)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace

from mwrun.membership.requests import Refused
from mwrun.plan import templates, timeouts
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import Plan, Pools, ProcessPlan, WorldPlan, process_plan, store_addr_for
from mwrun.plan.topology import Topology

PortChooser = Callable[[str, set[int]], int]


class Placer:
    def __init__(self, topology: Topology, plan: Plan, inventory: dict[str, HostInventory],
                 python: str | None, choose_port: PortChooser):
        self.topology, self.store_host = topology, plan.store_host
        self.python, self.choose_port = python, choose_port
        self.pools = Pools(inventory)
        for proc in plan.processes.values():
            self.pools.hold(proc)
        self.ports = {w.port for w in plan.worlds.values()}  # every port a world had

    def processes(self, started: Iterable[str], made: dict[str, templates.World]
                  ) -> dict[str, ProcessPlan]:
        """Plans for the new replicas, their GPUs and CPUs taken (all or none)."""
        errors: list = []
        placed = {}
        for name in started:
            entry, _, index = name.rpartition("-")
            proc = self.topology.specs[entry].replica(int(index))
            got = self.pools.take(proc, errors)
            mine = [w for w in made.values() if name in w.members]
            view = replace(self.topology, processes={name: proc})
            hang = timeouts.hang(view, name, [w.timeout for w in mine]).seconds
            placed[name] = process_plan(view, proc, got, {w.name: w.members.index(name)
                                                          for w in mine},
                                        (0, 1), self.python, hang)
        if errors:
            for name, done in placed.items():
                self.pools.release(name, done.host)
            raise Refused("cannot place every new replica: " + "; ".join(
                d.message for d in errors))
        return placed

    def world(self, world: templates.World, old: WorldPlan | None,
              processes: dict[str, ProcessPlan]) -> WorldPlan:
        """A world's plan: one that was there keeps its store (port, address) with its
        new members; a new one gets a store on a free port."""
        rejoin = timeouts.world_rejoin([processes[m].hang_timeout for m in world.members])
        rejoin_s = None if math.isinf(rejoin.seconds) else rejoin.seconds
        if old is not None:
            return replace(old, members=world.members, rejoin=rejoin_s)
        addr = store_addr_for(self.topology, [processes[m].host for m in world.members],
                              self.store_host)
        port = self.choose_port(addr, set(self.ports))
        self.ports.add(port)
        return WorldPlan(world.name, world.members, world.backend, world.timeout, addr, port,
                         True, world.on_failure, rejoin_s, world.template)

    def release(self, name: str, host: str) -> None:
        """A retired replica is gone: its GPUs and CPUs are free again."""
        self.pools.release(name, host)
