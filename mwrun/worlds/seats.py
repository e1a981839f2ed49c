"""Who sits where in a generation (elastic jobs; see ``members`` and ``removed`` in
mwrun.protocol): this member's rank and the world's size, and whether the world is
closed for this member rather than broken.

Under the launcher the head names every generation's members, by rank; a member
finds its rank as the index of its own process name, so a world may change its size
and its ranks from one generation to the next. By hand there is no such list, and a
member keeps the rank and size it was given.
"""

from __future__ import annotations

from mwrun import protocol
from mwrun.errors import WorldClosedError


def seat(store, world: str, generation: int, process: str | None,
         rank: int, size: int) -> tuple[int, int]:
    """(rank, size) of ``process`` in ``generation``: from the generation's members, or
    ``rank, size`` where there are none. WorldClosedError where ``process`` is not
    among them: it was removed from the world."""
    names = protocol.members(store, generation) if process is not None else None
    if names is None:
        return rank, size
    if process is None or process not in names:
        raise WorldClosedError(world, generation, removed_from(str(process), generation))
    return names.index(process), len(names)


def removed_from(process: str, generation: int) -> str:
    return f"{process} was removed from the world (it is not a member of generation" \
           f" {generation})"


def closes(store, generation: int, reason: str, process: str | None) -> str | None:
    """Whether the break of ``generation`` with ``reason`` closes the world for this
    member, and why: the world was removed (drained), or a resize left ``process``
    out of the next generation. None: a break like any other. Store errors read as
    None (the break is then said as it is)."""
    try:
        if protocol.removed(store, generation):
            return reason
        if process is not None and protocol.is_resize(reason):
            names = protocol.members(store, generation + 1)
            if names is not None and process not in names:
                return f"{removed_from(process, generation + 1)}: {reason.split(';')[0]}"
    except (RuntimeError, TimeoutError):
        return None
    return None
