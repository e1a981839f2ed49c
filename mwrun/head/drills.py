"""The fault drill (``mwrun kill-world``): who it hits (a pure function of the records)
and hitting them through the supervisor's host."""

from __future__ import annotations

import signal


def targets(worlds: dict, procs: dict, world_name: str, rank: int | None) -> list[str]:
    """WORLD's own members (in no other world), or exactly rank R; ValueError saying
    why when there is no one to hit."""
    world = worlds.get(world_name)
    if world is None:
        raise ValueError(f"no world named {world_name!r}; worlds: {', '.join(worlds)}")
    members = world.plan.members
    if rank is not None:
        if not 0 <= rank < len(members):
            raise ValueError(f"world {world_name} has ranks 0..{len(members) - 1}, not {rank}")
        return [members[rank]]
    own = [m for m in members if len(procs[m].plan.worlds) == 1]
    if not own:
        raise ValueError(f"every member of {world_name} is also in another world;"
                         " name one with --rank")
    return own


def kill_world(sup, world_name: str, rank: int | None, sig: int) -> list[dict]:
    """The fault drill: signal WORLD's own members (or one rank) through the
    supervisor's host; who was hit. Raises ValueError saying why no one was."""
    procs = sup.procs
    chosen = targets(sup.worlds, procs, world_name, rank)
    members = sup.worlds[world_name].plan.members
    hit = []
    for name in chosen:
        if procs[name].state.alive:
            sup.host.signal(name, sig)
            hit.append({"process": name, "pid": procs[name].pid, "rank": members.index(name)})
    if not hit:
        states = ", ".join(f"{t}: {procs[t].state.value}" for t in chosen)
        raise ValueError(f"no live member of {world_name} to signal ({states})")
    names = ", ".join(f"{h['process']} (pid {h['pid']})" for h in hit)
    sup.host.say(f"kill-world {world_name}: {signal.Signals(sig).name} to {names}")
    return hit
