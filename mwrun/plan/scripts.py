"""The script of a ``python FILE`` command, checked before anything starts: a FILE that
is not there fails every start of its process the same way (python: can't open file),
so it is a mistake in the topology, said where the command is written.

Only where the process runs on this machine (no hosts, or a host the head starts
itself): another machine's files cannot be seen from here, and ``validate`` says that
those were not checked.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence

PYTHON = re.compile(r"python[0-9.]*$")  # python, python3, python3.12
_VALUED = "WX"  # short options whose value follows (-W error, -Xdev)
_NOT_A_FILE = "cm"  # -c CODE, -m MODULE: python opens no script


def script(cmd: Sequence[str]) -> str | None:
    """FILE of ``python [OPTIONS] FILE [ARGS]``, as written; None where the command is
    not python's, or runs no file (-c, -m, a script from stdin)."""
    if not cmd or not PYTHON.match(os.path.basename(cmd[0])):
        return None
    args = iter(cmd[1:])
    for arg in args:
        if arg == "--":
            return next(args, None)
        if arg == "-":
            return None
        if not arg.startswith("-"):
            return arg
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs":
                next(args, None)
            continue
        if _short(arg, args):
            return None
    return None


def _short(group: str, args: Iterator[str]) -> bool:
    """One group of short options (-u, -OO, -uc): True where it says no file is run;
    an option's value (-W error) is taken from ``args``."""
    for i, flag in enumerate(group[1:], start=1):
        if flag in _NOT_A_FILE:
            return True
        if flag in _VALUED:
            if i == len(group) - 1:
                next(args, None)
            return False
    return False


def missing(cmd: Sequence[str], cwd: str, isfile) -> str | None:
    """The script ``cmd`` runs, as a path from ``cwd``, where ``isfile`` says it is
    not there; else None."""
    file = script(cmd)
    if file is None:
        return None
    path = os.path.normpath(os.path.join(cwd, file))
    return None if isfile(path) else path


def here(hosts, host: str, local: bool) -> bool:
    """A process on ``host`` runs on this machine: with no ``hosts``, where the launcher
    is ``local``; else where its host is one the head starts itself (a network
    namespace of this machine included), not one reached through an agent."""
    if not hosts:
        return local
    found = hosts.get(host)
    return found is not None and not found.remote


def unchecked(topology) -> list[str]:
    """The process entries whose python script runs on another machine: ``validate``
    and ``launch`` cannot see it, so it was not checked."""
    local = topology.launcher == "local"
    return [name for name, spec in topology.specs.items()
            if script(spec.base.cmd) is not None
            and not here(topology.hosts, spec.base.host, local)]
