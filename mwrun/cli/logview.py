"""Reading a process's log, with its rotated parts, and following it as it grows."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mwrun.head.console import LOG_BACKUPS

FOLLOW_EVERY = 0.2  # seconds between looks at a growing file


def show(path: Path, follow: bool, live, echo) -> None:
    """Print the log (oldest rotated part first); with follow, keep printing until the
    run is over. ``live()`` tells whether the run still runs."""
    for part in range(LOG_BACKUPS, 0, -1):
        rotated = path.with_name(f"{path.name}.{part}")
        if rotated.exists():
            echo(rotated.read_text(errors="replace"), nl=False)
    position, inode = 0, None
    while True:
        try:
            info = os.stat(path)
            if info.st_ino != inode or info.st_size < position:
                position, inode = 0, info.st_ino  # rotated or new: start at its top
            with open(path, "rb") as log:
                log.seek(position)
                data = log.read()
                position = log.tell()
            if data:
                echo(data.decode("utf-8", "replace"), nl=False)
        except FileNotFoundError:
            pass
        if not follow:
            return
        if not live():
            follow = False  # one last read picks up the final lines
            continue
        time.sleep(FOLLOW_EVERY)
