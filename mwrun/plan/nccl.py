"""NCCL as the launcher and the head see it: pure functions, no torch.

``member_env``: what every member of an nccl world is started with (why each
variable, and its value, is explained in ``mwrun/worlds/nccl.py``, whose
``member_env`` the library applies by hand; the two must agree, and a unit test holds
them together: the launcher may not import the library, nor the library the
launcher).

``label`` / ``known_bad`` / ``warning``: each process tells its NCCL version in its
hello to the supervisor (read from torch there, no CUDA initialised, null on a build
without NCCL). The head shows ``label(version)`` per process in ``status`` and says
``warning(...)`` once per bad version it meets.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection

# The library's values (mwrun/worlds/nccl.py): see there for why.
TORCH_HEARTBEAT = 480
FLIGHT_RECORDER_WAIT = 60
ABORT_DEADLINE = 10.0

# (first, last, what goes wrong): releases whose faults break what mwrun promises.
# 2.25.1: ncclCommAbort hangs under ProcessGroupNCCL.abort() (pytorch#149153, fixed in
# 2.26.2). 2.28.3-2.28.8: named known-bad in mwrun's design contract ("GPU worlds").
KNOWN_BAD = (
    ((2, 25, 1), (2, 25, 1), "ncclCommAbort can hang, so a broken world's member is"
                             " killed instead of keeping its other worlds"),
    ((2, 28, 3), (2, 28, 8), "a known-bad NCCL release range (2.28.3-2.28.8);"
                             " upgrade NCCL (or torch) before relying on fault isolation"),
)
NONE = "-"  # the status column of a process with no NCCL (a CPU build, or not told)


def member_env(call_timeout: float) -> dict[str, str]:
    """The variables a member of an nccl world starts with, unless its topology's
    ``env`` sets them; ``call_timeout`` is the longest timeout of its nccl worlds."""
    heartbeat = max(TORCH_HEARTBEAT, math.ceil(call_timeout) + FLIGHT_RECORDER_WAIT
                    + math.ceil(ABORT_DEADLINE) + 60)
    return {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(heartbeat),
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
            "TORCH_NCCL_NONBLOCKING_TIMEOUT": str(max(1, math.ceil(call_timeout))),
            "TORCH_FR_BUFFER_SIZE": "2000"}


def unset(wanted: dict[str, str], env: Collection[str]) -> dict[str, str]:
    """What of ``wanted`` ``env`` does not set: the Flight Recorder's size counts as
    set under its older name too (torch reads either)."""
    taken = set(env) | ({"TORCH_FR_BUFFER_SIZE"} if "TORCH_NCCL_TRACE_BUFFER_SIZE" in env
                        else set())
    return {k: v for k, v in wanted.items() if k not in taken}


def parse(version) -> tuple[int, int, int] | None:
    """"2.21.5" (or "2.21.5+cuda12.4") -> (2, 21, 5); None if it is not a version."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version) if isinstance(version, str) else None
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def label(version) -> str:
    """The status column: the version as the process told it, or "-" if none."""
    return version if parse(version) is not None else NONE


def known_bad(version) -> str | None:
    """What goes wrong with this NCCL, or None when nothing is known against it."""
    found = parse(version)
    if found is None:
        return None
    for first, last, why in KNOWN_BAD:
        if first <= found <= last:
            return why
    return None


def warning(process: str, version, warned: Collection[str]) -> str | None:
    """The one warning for ``version`` (told by ``process``), or None when it is not
    known-bad or ``warned`` (the versions the head has warned of) holds it already.
    The head adds ``version`` to ``warned`` when it says this."""
    why = known_bad(version)
    if why is None or version in warned:
        return None
    return f"warning: {process} runs NCCL {version}: {why}"
