"""The one check every state move of the head passes: the move must be drawn in its
machine's table (``mwrun.schema``: PROCESS_MOVES, WORLD_MOVES, RUN_MOVES). The movers
(``Processes.move``, ``Worlds.move``, ``Supervisor`` for the run) are the only code that
sets a record's state (tests/unit/test_layout.py holds that), and each calls this."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

S = TypeVar("S", bound=Enum)


class IllegalMove(AssertionError):
    """A state moved where its machine draws no arrow: a bug in the head, never a user's
    mistake (so no ``MwrunError``: it must show as the bug it is)."""


def checked(table: Mapping[S, frozenset[S]], what: str, old: S, new: S) -> S:
    """``new``, if ``old -> new`` is drawn in ``table``; else IllegalMove."""
    if new not in table[old]:
        raise IllegalMove(f"{what} may not move {old.value} -> {new.value}")
    return new
