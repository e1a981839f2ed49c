"""Fencing: a generation admits one incarnation per rank (protocol.py, ``admit``).

A member checks the generation it is about to join before it arrives there. A stale
copy of a rank (it kept running while its host stalled, was declared lost and had the
rank started again elsewhere) is refused: it says so on stderr and ends, since nothing
it could do afterwards is right (it is no longer the process the supervisor shows, and
its supervisor link leads to a stalled agent). The key space its group would form in
is named with its own incarnation in its rank's place, so even so it could only ever
meet itself, never the admitted members.
"""

from __future__ import annotations

import os
import sys

from mwrun import protocol

STALE_EXIT = 75  # EX_TEMPFAIL: not this process's turn any more


def admitted(store, world: str, generation: int, rank: int, size: int,
             incarnation: int | None) -> list[int] | None:
    """The incarnations that name the generation's key space (None: none are written,
    by hand); ends this process when the generation admits another copy of its rank."""
    allowed = protocol.admitted(store, generation, size)
    if allowed is None:
        return None
    if incarnation is None:  # a library under a head that fences, told nothing
        return allowed
    if allowed[rank] != incarnation:
        end(world, generation, rank, incarnation, allowed[rank])
    return [*allowed[:rank], incarnation, *allowed[rank + 1:]]


def end(world: str, generation: int, rank: int, mine: int, admitted: int) -> None:
    """A stale copy ends at once (its worlds' peers never saw it in this generation)."""
    sys.stdout.flush()
    print(f"mwrun: this process is a stale copy of rank {rank} of world {world!r}"
          f" (incarnation {mine}; generation {generation} admits incarnation {admitted}:"
          " its host was replaced while it ran); ending it", file=sys.stderr, flush=True)
    os._exit(STALE_EXIT)
