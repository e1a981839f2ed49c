"""The fault drill (``mwrun kill-world``): who it hits (a pure function of the records),
hitting them through what the supervisor gives, and what the user is told. A drill's
slow member (``--signal SLOW``) is no fault: one member is told to come late to every
call of the world for a while, and the head's slowness rule should name it."""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping

from mwrun.head.decide.records import ProcessRecord, WorldRecord
from mwrun.protocol import Verb


def targets(worlds: Mapping[str, WorldRecord], procs: Mapping[str, ProcessRecord],
            world_name: str, rank: int | None) -> list[str]:
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


def kill_world(worlds: Mapping[str, WorldRecord], procs: Mapping[str, ProcessRecord],
               world_name: str, rank: int | None, sig: int,
               send: Callable[[str, int], None]) -> list[dict]:
    """The fault drill: ``send`` the signal to WORLD's own live members (or one rank);
    who was hit. Raises ValueError saying why no one was."""
    chosen = targets(worlds, procs, world_name, rank)
    members = worlds[world_name].plan.members
    hit = []
    for name in chosen:
        if procs[name].state.alive:
            send(name, sig)
            hit.append({"process": name, "pid": procs[name].worker.pid,
                        "rank": members.index(name)})
    if not hit:
        states = ", ".join(f"{t}: {procs[t].state.value}" for t in chosen)
        raise ValueError(f"no live member of {world_name} to signal ({states})")
    return hit


def told(world_name: str, sig: int, hit: list[dict]) -> str:
    """What the user is told of a drill."""
    names = ", ".join(f"{h['process']} (pid {h['pid']})" for h in hit)
    return f"kill-world {world_name}: {signal.Signals(sig).name} to {names}"


def make_late(worlds: Mapping[str, WorldRecord], procs: Mapping[str, ProcessRecord],
              world_name: str, rank: int | None, delay: float, hold: float,
              tell: Callable[[str, dict], None]) -> dict:
    """Tell one member of WORLD (rank R, or the last of its own members: making every
    member late would make none the slow one) to be ``delay`` seconds late to each of
    its calls there for ``hold`` seconds; who it is. ValueError saying why no one."""
    name = targets(worlds, procs, world_name, rank)[-1]
    if not procs[name].state.alive:
        raise ValueError(f"{name} of {world_name} is not running ({procs[name].state.value})")
    tell(name, {"verb": Verb.LATE.value, "world": world_name, "delay": delay, "for": hold})
    return {"process": name, "pid": procs[name].worker.pid,
            "rank": worlds[world_name].plan.members.index(name)}


class Drills:
    """The drills on a running job, as ``kill_world`` asks them: whom they hit, hit
    through the supervisor's beats (a drilled exit is told as one) and its host, and
    each told to the user and the history."""

    def __init__(self, worlds: Mapping[str, WorldRecord], procs: Mapping[str, ProcessRecord],
                 signal: Callable[[str, int], None], tell: Callable[[str, dict], None],
                 say: Callable[[str], None], late: Callable[[str, str, float, float], None]):
        self.worlds, self.procs, self.signal, self.tell = worlds, procs, signal, tell
        self.say, self.late = say, late

    def kill_world(self, world_name: str, rank: int | None, sig: int) -> list[dict]:
        """The fault drill (``kill_world`` above); raises ValueError."""
        hit = kill_world(self.worlds, self.procs, world_name, rank, sig, self.signal)
        self.say(told(world_name, sig, hit))
        return hit

    def make_late(self, world_name: str, rank: int | None, delay: float,
                  hold: float) -> dict:
        """A drill's slow member (``make_late`` above); raises ValueError."""
        hit = make_late(self.worlds, self.procs, world_name, rank, delay, hold, self.tell)
        self.late(hit["process"], world_name, delay, hold)
        self.say(f"kill-world {world_name}: {hit['process']} made"
                 f" {delay * 1000:g} ms late to every call for {hold:g}s")
        return hit
