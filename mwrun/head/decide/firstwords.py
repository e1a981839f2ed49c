"""A first start that ends before it said hello could not start: a script that is not
there (on a host whose files ``validate`` cannot see), an import that fails, a bad
argument. Restarting it would fail the same way, over and over, with every peer's
worlds breaking each time; so it is said once, plainly, with the last line the process
printed ("worker-0 could not start: python3: can't open file '/x/nope.py': ..."), and
not retried (``policy.after_exit``: a start error).

Only a first start, only one whose words read as a failure to start (a Python
traceback, or a last line in a program's complaining shape: "...Error: ...", "can't
open file", "No such file", "usage: ..."), ended with a code (not a signal, a hang, a
lost host or a drill), never said hello and never joined its worlds, and whose worlds
never broke meanwhile: a process that got going once is restarted by its policy as
ever, and so is one whose peer ended while it started (a plain torch.distributed
script then fails its rendezvous with an error and exits 1: that says nothing of its
command, and its restart re-forms the world). A script that ran (a plain CUDA one that
never joins its world, say), printed its own results and exited 1 got going: it is
restarted by its policy, never called one that could not start (the GPU suite's
pinned process, exiting 1 on purpose after its first line).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import replace

from mwrun.head.decide.policy import Exit
from mwrun.head.decide.records import ProcessRecord, WorldRecord
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W

TRACEBACK = "Traceback (most recent call last):"
# The last line of a command that could not start: Python's own error line, an exec or
# open failure, an argument parser's complaint. Words inside identifiers
# ("error_handling") do not count.
COMPLAINT = re.compile(r"^usage: |\b(\w*Error|\w*Exception|[Ee]rror|[Ee]rrno|can't|cannot"
                       r"|[Nn]o such|not found|[Pp]ermission denied)\b")


class FirstWords:
    """The last line each process printed in its first start, until it said hello."""

    def __init__(self, records: Mapping[str, ProcessRecord],
                 worlds: Mapping[str, WorldRecord]):
        self.records, self.worlds = records, worlds
        self.last: dict[str, str] = {}
        self.traced: set[str] = set()  # printed a Python traceback in its first start

    def heard(self, name: str, lines: list[str]) -> None:
        """``name`` printed ``lines`` (the hands read them before they tell its exit)."""
        rec = self.records.get(name)
        if rec is None or rec.restarts or rec.worker.said_hello:
            return
        said = next((line.strip() for line in reversed(lines) if line.strip()), None)
        if said is not None:
            self.last[name] = said
        if any(line.startswith(TRACEBACK) for line in lines):
            self.traced.add(name)

    def judged(self, rec: ProcessRecord, exit: Exit) -> Exit:
        """``exit`` as a start error where this start of ``rec`` could not start."""
        said = self.last.pop(rec.plan.name, None)
        traced = rec.plan.name in self.traced
        self.traced.discard(rec.plan.name)
        if said is None or not (traced or COMPLAINT.search(said)) \
                or exit.code is None or exit.code <= 0 or exit.hung or exit.lost \
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
