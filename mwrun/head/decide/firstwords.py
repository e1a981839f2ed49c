"""A first start that ends before it said hello could not start: a script that is not
there (on a host whose files ``validate`` cannot see), an import that fails, a bad
argument. Restarting it would fail the same way, over and over, with every peer's
worlds breaking each time; so it is said once, plainly, with the last line the process
printed ("worker-0 could not start: python3: can't open file '/x/nope.py': ..."), and
not retried (``policy.after_exit``: a start error).

Only a first start, only one that printed something, ended with a code (not a signal,
a hang, a lost host or a drill), never said hello and never joined its worlds, and
whose worlds never broke meanwhile: a process that got going once is restarted by its
policy as ever, and so is one whose peer ended while it started (a plain
torch.distributed script then fails its rendezvous with an error and exits 1: that says
nothing of its command, and its restart re-forms the world).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

from mwrun.head.decide.policy import Exit
from mwrun.head.decide.records import ProcessRecord, WorldRecord
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W


class FirstWords:
    """The last line each process printed in its first start, until it said hello."""

    def __init__(self, records: Mapping[str, ProcessRecord],
                 worlds: Mapping[str, WorldRecord]):
        self.records, self.worlds = records, worlds
        self.last: dict[str, str] = {}

    def heard(self, name: str, lines: list[str]) -> None:
        """``name`` printed ``lines`` (the hands read them before they tell its exit)."""
        rec = self.records.get(name)
        if rec is None or rec.restarts or rec.worker.said_hello:
            return
        said = next((line.strip() for line in reversed(lines) if line.strip()), None)
        if said is not None:
            self.last[name] = said

    def judged(self, rec: ProcessRecord, exit: Exit) -> Exit:
        """``exit`` as a start error where this start of ``rec`` could not start."""
        said = self.last.pop(rec.plan.name, None)
        if said is None or exit.code is None or exit.code <= 0 or exit.hung or exit.lost \
                or exit.drilled or rec.restarts or rec.worker.said_hello \
                or rec.state is not P.STARTING or rec.retired or self._broke(rec):
            return exit
        return replace(exit, start_error=plain(said))


    def _broke(self, rec: ProcessRecord) -> bool:
        """A world of ``rec`` broke while it started (a peer ended)."""
        return any(world.generation > 0 or world.state is W.BROKEN
                   for world in (self.worlds.get(w) for w in rec.plan.worlds)
                   if world is not None)


def plain(line: str) -> str:
    """The line with a program's path shortened to its name, as people say it:
    "/usr/bin/python3: can't open file ..." reads "python3: can't open file ..."."""
    program, sep, rest = line.partition(": ")
    if sep and program.startswith("/") and " " not in program:
        return f"{os.path.basename(program)}: {rest}"
    return line
