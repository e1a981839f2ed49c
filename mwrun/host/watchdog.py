"""The orphan guard: a tiny process that outlives a supervisor killed with SIGKILL.

The supervisor starts it with a pipe on its stdin and writes ``+PGID`` for every
process group it spawns, ``-PGID`` when one is gone, and ``exit`` when it ends
cleanly. If the pipe closes without ``exit``, the supervisor died without cleaning
up, and the watchdog kills every group it was told of. (A parent-death signal would
reach only direct children; a process group reaches what they started too.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the supervisor's fate ends us
    groups: set[int] = set()
    for line in sys.stdin:
        line = line.strip()
        if line == "exit":
            return
        if line[:1] in "+-" and line[1:].isdigit():
            (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    main()
