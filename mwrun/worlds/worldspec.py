"""What a process is told about one of its worlds (no torch here)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from mwrun.errors import MwrunError

BACKENDS = ("gloo", "nccl")


@dataclass(frozen=True)
class WorldSpec:
    """One world as seen by one member: its rank, the world's size and its store.

    ``host_store``: this member runs the world's store itself. Under ``mwrun launch``
    the supervisor hosts every store; by hand (``mwrun.init(worlds=...)``) rank 0 does
    unless told otherwise.
    """

    rank: int
    size: int
    addr: str = "127.0.0.1"
    port: int = 29500
    backend: str = "gloo"
    timeout: float = 30.0
    generation: int = 0
    host_store: bool | None = None  # None: rank 0 by hand, never under the launcher
    # How long rejoin() waits by default; None: until the world re-forms or is closed.
    # The launcher derives it above every member's hang_timeout (plan/timeouts.py).
    rejoin: float | None = None

    def __post_init__(self):
        if not isinstance(self.size, int) or self.size < 1:
            raise MwrunError(f"size must be a whole number of at least 1, not {self.size!r}")
        if not isinstance(self.rank, int) or not 0 <= self.rank < self.size:
            raise MwrunError(f"rank must be in 0..{self.size - 1}, not {self.rank!r}")
        if self.backend not in BACKENDS:
            raise MwrunError(f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}")
        if not 0 < self.port < 65536:
            raise MwrunError(f"port must be in 1..65535, not {self.port!r}")
        if not self.timeout > 0:
            raise MwrunError(f"timeout must be more than 0 seconds, not {self.timeout!r}")

    @property
    def hosts_store(self) -> bool:
        return self.rank == 0 if self.host_store is None else self.host_store


def from_environment(environ: Mapping[str, str] = os.environ) -> dict[str, WorldSpec]:
    """The worlds the launcher gave this process in MWRUN_WORLDS."""
    text = environ.get("MWRUN_WORLDS")
    if not text:
        raise MwrunError("MWRUN_WORLDS is not set: start this script with 'mwrun launch',"
                         " or name its worlds: mwrun.init(worlds={...})")
    try:
        data = json.loads(text)
        return {name: from_fields(w) for name, w in data.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MwrunError(f"MWRUN_WORLDS is malformed ({exc}): {text[:200]}") from None


def from_fields(w: Mapping) -> WorldSpec:
    """One world as the launcher describes it (MWRUN_WORLDS, or the head's ``add``):
    the supervisor hosts its store. ValueError, KeyError, TypeError or MwrunError
    when malformed."""
    return WorldSpec(rank=int(w["rank"]), size=int(w["size"]), addr=str(w["addr"]),
                     port=int(w["port"]), backend=w.get("backend", "gloo"),
                     timeout=float(w.get("timeout", 30.0)),
                     generation=int(w.get("generation", 0)), host_store=False,
                     rejoin=None if w.get("rejoin") is None else float(w["rejoin"]))


def from_worldinfo(items: list[str], size: int, addr: str = "127.0.0.1",
                   backend: str = "gloo", base_port: int = 29500,
                   timeout: float = 30.0) -> dict[str, WorldSpec]:
    """MultiWorld's ``--worldinfo W,R`` arguments as WorldSpecs, by hand.

    World W is named ``worldW`` and its store listens on ``base_port + 1000 * W``, as in
    the MultiWorld examples, so their command lines carry over unchanged.
    """
    specs = {}
    for item in items:
        try:
            index, rank = (int(part) for part in item.split(","))
        except ValueError:
            raise MwrunError(f"--worldinfo {item!r}: give WORLD,RANK, e.g. 1,0") from None
        specs[f"world{index}"] = WorldSpec(rank=rank, size=size, addr=addr, backend=backend,
                                           port=base_port + 1000 * index, timeout=timeout)
    return specs
