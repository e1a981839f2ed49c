"""The one exception root of mwrun, and the errors users see.

User mistakes (a wrong topology, an unknown run) are ``MwrunError`` subclasses: the CLI
prints them as one ``Error: ...`` line and never a traceback. A traceback from mwrun
means a bug in mwrun.
"""

from __future__ import annotations

from dataclasses import dataclass


class MwrunError(Exception):
    """Root of every error mwrun raises on purpose."""

    exit_code = 1


class UsageError(MwrunError):
    """Bad input on the command line or in a file: exit status 2."""

    exit_code = 2


@dataclass(frozen=True)
class Diagnostic:
    """One problem in a file, at a 0-based line and column."""

    source: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line + 1}:{self.column + 1}: {self.message}"


class TopologyError(UsageError):
    """Everything wrong with a topology file, all at once, in file order."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = sorted(diagnostics, key=lambda d: (d.source, d.line, d.column))
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class RunError(MwrunError):
    """A run that cannot be found, reached or started."""


class NotListening(RunError):
    """No one answers on a run's control socket: its supervisor is not listening (yet,
    while the run starts, or any more)."""


class StaleHead(RunError):
    """A newer head adopted the run while this one was stopped or cut off, or took it
    over from this one (``handed``: mwrun restart-head): this head changes nothing more
    (head/epochs.py) and exits."""

    exit_code = 3

    def __init__(self, text: str, handed: bool = False):
        super().__init__(text)
        self.handed = handed


class StartError(RunError):
    """A process could not be started (command not found, not executable, bad cwd...)."""


class BrokenWorldError(MwrunError, RuntimeError):
    """A world broke: a member died, hung, or the world's host marked it broken.

    Every call on the world raises this at once until ``World.rejoin()`` succeeds.
    """

    def __init__(self, world: str, generation: int, reason: str):
        self.world = world
        self.generation = generation
        self.reason = reason
        super().__init__(f"world {world!r} (generation {generation}) is broken: {reason}")

    def __reduce__(self):
        return (type(self), (self.world, self.generation, self.reason))


class WorldEnded(BrokenWorldError):
    """A peer left the world normally (it closed it): the world ended, nothing failed.

    A ``BrokenWorldError`` all the same (calls on the world raise it until ``rejoin()``,
    which succeeds if the peer comes back), so code written for breaks keeps working.
    """

    def __init__(self, world: str, generation: int, reason: str):
        super().__init__(world, generation, reason)
        self.args = (f"world {world!r} (generation {generation}) has ended: {reason}",)


class WorldClosedError(MwrunError, RuntimeError):
    """A world was closed on purpose: drained away (``mwrun scale``, ``mwrun drain``,
    ``world.release()``) or this member was removed from it by a resize. Not a
    ``BrokenWorldError``: nothing failed and nothing will re-form, so code that rejoins
    after a break does not catch it. The world has left ``job.worlds``.
    """

    def __init__(self, world: str, generation: int, reason: str):
        self.world = world
        self.generation = generation
        self.reason = reason
        super().__init__(f"world {world!r} (generation {generation}) is closed: {reason}")

    def __reduce__(self):
        return (type(self), (self.world, self.generation, self.reason))
