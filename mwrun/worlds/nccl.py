"""The nccl discipline: one world's fault stays in that world, on GPUs too.

Read against torch 2.13's ``ProcessGroupNCCL`` (and NCCL's issues):

* ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` picks what torch's watchdog does when a
  collective fails or outlives the group's timeout: 0 nothing, 1 tear the process
  down, 2 abort the communicator only ("CleanUpOnly"), 3 tear down without cleaning
  up ("SkipCleanUp", torch's default). Only 2 keeps a process in several worlds alive
  when one of them fails, so members of nccl worlds run with 2.
* The heartbeat monitor kills the process when the watchdog thread stands still for
  ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` (480 s by default). After a failure the
  watchdog legitimately stands still for the flight recorder's wait (4 x 15 s) and an
  abort, so the heartbeat timeout is kept above the world's call timeout plus those
  (``heartbeat_timeout``): a slow but healthy collective, or a clean abort, never
  reads as a watchdog hang.
* With ``TORCH_NCCL_DUMP_ON_TIMEOUT`` on (torch's default), a failure in *any*
  nccl group flags a process-wide dump, and the monitor of the process's *first*
  nccl group then ends the whole process once it has dumped, whichever world failed.
  Members of nccl worlds run with it off, so a break ends the world, not its process
  (a user who wants the flight recorder sets it, and mwrun leaves it as set).
* ``TORCH_FR_BUFFER_SIZE`` turns torch's Flight Recorder on (the last 2000 calls kept
  in a ring buffer, torch's suggested size): a post-mortem bundle then holds
  each member's last calls with their numbers (worlds/flight.py). Off by default in
  torch; a user who sets it (or ``TORCH_NCCL_TRACE_BUFFER_SIZE``) to 0 turns it off.
* ``TORCH_NCCL_NONBLOCKING_TIMEOUT`` bounds how long a nonblocking communicator's
  set-up (and abort) may take: the world's timeout, not 30 minutes.

The launcher gives these variables to every member of an nccl world
(``mwrun.plan.environment``, which must agree with ``member_env``: a unit test holds
them together); the library sets the same by hand, before its first nccl group, where
they are unset (``ensure_env``). What a user sets always wins.

Nonblocking communicators (``ncclConfig_t.blocking = 0``) need NCCL >= 2.14, and
torch turned their automatic use off because NCCL 2.26 hangs in nonblocking mode
(pytorch#153960): ``nonblocking_ok`` says where mwrun asks for them.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import MutableMapping

ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
CLEAN_UP_ONLY = "2"  # torch's ErrorHandlingMode::CleanUpOnly
HEARTBEAT = "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"
DUMP_ON_TIMEOUT = "TORCH_NCCL_DUMP_ON_TIMEOUT"
NONBLOCKING_TIMEOUT = "TORCH_NCCL_NONBLOCKING_TIMEOUT"
FLIGHT_RECORDER = "TORCH_FR_BUFFER_SIZE"
FLIGHT_RECORDER_OLD = "TORCH_NCCL_TRACE_BUFFER_SIZE"  # torch reads it where the above is unset
FLIGHT_ENTRIES = 2000  # torch's suggested size: calls kept per process
TORCH_HEARTBEAT = 480  # torch's default heartbeat timeout, seconds
FLIGHT_RECORDER_WAIT = 60  # 4 x TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC (15 s): the watchdog's
#                            sleep after a failure, before it cleans up
ABORT_DEADLINE = 10.0  # seconds an abort may take before the supervisor is told (aborts.py)
NONBLOCKING_SINCE = (2, 14, 0)
NONBLOCKING_BROKEN = ((2, 26, 0), (2, 26, 99))  # pytorch#153960


def heartbeat_timeout(call_timeout: float) -> int:
    """Seconds of watchdog silence torch may take for a hang, for a process whose
    longest nccl call timeout is ``call_timeout``: never below torch's own default,
    always above a call's timeout, the flight recorder's wait and an abort."""
    return max(TORCH_HEARTBEAT,
               math.ceil(call_timeout) + FLIGHT_RECORDER_WAIT + math.ceil(ABORT_DEADLINE) + 60)


def member_env(call_timeout: float) -> dict[str, str]:
    """The variables every member of an nccl world runs with (unless it set them)."""
    return {ERROR_HANDLING: CLEAN_UP_ONLY,
            HEARTBEAT: str(heartbeat_timeout(call_timeout)),
            DUMP_ON_TIMEOUT: "0",
            NONBLOCKING_TIMEOUT: str(max(1, math.ceil(call_timeout))),
            FLIGHT_RECORDER: str(FLIGHT_ENTRIES)}


def ensure_env(call_timeout: float, environ: MutableMapping[str, str] | None = None) -> dict:
    """Set what ``member_env`` names and the process has not set; returns what it set.

    Must run before the process's first nccl group is made (torch reads these when a
    group is built) and before torch's own threads run (setenv beside a getenv in
    another thread is a race torch itself warns of): ``mwrun.init`` calls it first.
    """
    environ = os.environ if environ is None else environ
    wanted = member_env(call_timeout)
    taken = set(environ) | ({FLIGHT_RECORDER} if FLIGHT_RECORDER_OLD in environ else set())
    missing = {k: v for k, v in wanted.items() if k not in taken}
    environ.update(missing)
    return missing


def version(torch_module=None) -> str | None:
    """This process's NCCL as "2.21.5" (with torch's suffix, if any), or None on a
    build without NCCL. Asks the library linked into torch: no CUDA is initialised."""
    if torch_module is None:
        import torch as torch_module
    c = getattr(torch_module, "_C", None)
    if c is None or not hasattr(c, "_nccl_version"):
        return None
    try:
        number = int(c._nccl_version())
        suffix = c._nccl_version_suffix().decode() if hasattr(c, "_nccl_version_suffix") \
            else ""
    except (RuntimeError, AttributeError, UnicodeDecodeError):
        return None
    text = f"{number >> 32}.{(number >> 16) & 0xFFFF}.{number & 0xFFFF}"
    return f"{text}{suffix}" if suffix else text


def parse(text: str | None) -> tuple[int, int, int] | None:
    """"2.21.5" (or "2.21.5+cuda12.4") -> (2, 21, 5); None if it is not a version."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", text) if isinstance(text, str) else None
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def nonblocking_ok(nccl_version: str | None) -> bool:
    """Whether to ask for a nonblocking communicator with this NCCL."""
    found = parse(nccl_version)
    if found is None or found < NONBLOCKING_SINCE:
        return False
    low, high = NONBLOCKING_BROKEN
    return not low <= found <= high
