"""What a scale or drain request asks, checked against the topology before anything
moves: ``worker=6`` (absolute), ``worker=+2`` / ``worker=-1`` (relative to what is
desired now), ``drain worker-3`` (that one replica). Which replicas: new ones take the
lowest free indices, removed ones are the highest (``drain`` names its own).

A request that cannot be met in full (an unknown process, one without ``scale``, a
count beyond its bounds) is refused whole, with a reason that names the fix:
``Refused``. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mwrun.errors import UsageError
from mwrun.plan.processes import ProcessSpec

_CHANGE = re.compile(r"^(?P<process>[A-Za-z_][A-Za-z0-9_.-]*)=(?P<sign>[+-]?)(?P<count>\d+)$")
_REPLICA = re.compile(r"^(?P<process>.+)-(?P<index>\d+)$")


class Refused(UsageError):
    """A request that changes nothing: the whole request is refused."""


@dataclass(frozen=True)
class Change:
    """One process's part of a scale request."""

    process: str
    count: int
    relative: bool  # count is a difference (+K/-K) rather than a number of replicas

    def target(self, current: int) -> int:
        return current + self.count if self.relative else self.count

    def __str__(self) -> str:
        return f"{self.process}={self.count:+d}" if self.relative else \
            f"{self.process}={self.count}"


def parse_change(text: str) -> Change:
    """``PROCESS=N``, ``PROCESS=+K`` or ``PROCESS=-K``; Refused for anything else."""
    found = _CHANGE.match(str(text).strip())
    if found is None:
        raise Refused(f"{text!r}: write PROCESS=N, PROCESS=+K or PROCESS=-K (like worker=4)")
    count = int(found["count"])
    return Change(found["process"], -count if found["sign"] == "-" else count,
                  bool(found["sign"]))


def scaled(specs: Mapping[str, ProcessSpec], process: str) -> ProcessSpec:
    """The scaled entry ``process`` names; Refused, saying why, for anything else."""
    spec = specs.get(process)
    if spec is not None and spec.scale is not None:
        return spec
    if spec is not None:
        raise Refused(f"process '{process}' has no 'scale:' in the topology, so its count"
                      " is fixed; give it scale: {min: N, max: M} to scale it")
    replica = _REPLICA.match(process)
    if replica is not None and replica["process"] in specs:
        raise Refused(f"'{process}' names one replica; scale '{replica['process']}'"
                      f" ({replica['process']}=N) or retire this one with mwrun drain"
                      f" {process}")
    scalable = sorted(n for n, s in specs.items() if s.scale is not None)
    raise Refused(f"no process '{process}' in this job; scaled processes:"
                  f" {', '.join(scalable) or 'none'}")


def bounded(spec: ProcessSpec, change: Change, current: int) -> int:
    """The count ``change`` asks for, within the entry's bounds, else Refused."""
    target = change.target(current)
    scale = spec.scale
    assert scale is not None  # scaled() found it
    if not scale.min <= target <= scale.max:
        raise Refused(f"{change}: {spec.name} would have {target} replicas; its scale is"
                      f" {scale.min}-{scale.max} (now {current})")
    return target


def added(indices: Iterable[int], count: int, taken: Iterable[int] = ()) -> list[int]:
    """``count`` new indices, the lowest free (``taken``: still in use, say draining)."""
    used = set(indices) | set(taken)
    if not used or max(used) + 1 == len(used):  # no gap: the next ones (no scan)
        return list(range(len(used), len(used) + count))
    found: list[int] = []
    index = 0
    while len(found) < count:
        if index not in used:
            found.append(index)
        index += 1
    return found


def replica(specs: Mapping[str, ProcessSpec], name: str) -> tuple[ProcessSpec, int]:
    """The scaled entry and index of replica ``name`` (``worker-3``); Refused else."""
    found = _REPLICA.match(name)
    spec = specs.get(found["process"]) if found else None
    if found is None or spec is None or spec.replicas is None:
        own = specs.get(name)
        if own is not None and own.scale is not None:
            raise Refused(f"'{name}' names a process, not one replica; drain one of its"
                          f" replicas ({name}-0, ...) or scale it ({name}=N)")
        if own is not None:
            raise Refused(f"'{name}' is not a replica of a scaled process; only those are"
                          " drained")
        raise Refused(f"no replica '{name}' in this job (a replica is named like worker-3)")
    scaled(specs, spec.name)
    return spec, int(found["index"])
