"""Reading a process's log, with its rotated parts, and following it as it grows."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mwrun.schema import LOG_BACKUPS

FOLLOW_EVERY = 0.2  # seconds between looks at a growing file


def show(path: Path, follow: bool, live, echo) -> None:
    """Print the log (oldest rotated part first); with follow, keep printing until the
    run is over. ``live()`` tells whether the run still runs."""
    for part in range(LOG_BACKUPS, 0, -1):
        rotated = path.with_name(f"{path.name}.{part}")
        if rotated.exists():
            echo(rotated.read_text(errors="replace"), nl=False)
    log = None
    try:
        while True:
            log = _read_on(path, log, echo)
            if not follow:
                return
            if not live():
                follow = False  # one last read picks up the final lines
                continue
            time.sleep(FOLLOW_EVERY)
    finally:
        if log is not None:
            log.close()


def _read_on(path: Path, log, echo):
    """Print what was added since the last look. At a rotation the file followed so
    far is renamed away: print the rest of it, then the new file from its top."""
    if log is not None:
        _rest(log, echo)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return log
    if log is None or os.fstat(log.fileno()).st_ino != info.st_ino:
        if log is not None:
            log.close()
        log = open(path, "rb")  # noqa: SIM115 - kept open across looks, closed by show()
        _rest(log, echo)
    elif info.st_size < log.tell():  # cut short in place: start again at its top
        log.seek(0)
        _rest(log, echo)
    return log


def _rest(log, echo) -> None:
    data = log.read()
    if data:
        echo(data.decode("utf-8", "replace"), nl=False)
