"""Who a fault drill hits (``mwrun kill-world``): a pure function of the records."""

from __future__ import annotations


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
