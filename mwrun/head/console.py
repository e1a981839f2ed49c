"""The head's console: every process's lines shown prefixed with its name, and kept in
``logs/NAME.log`` (rotated at a size cap, so a chatty job cannot fill the disk); mwrun's
own events likewise, in ``events.log``."""

from __future__ import annotations

import logging
import time
from logging.handlers import RotatingFileHandler
from pathlib import Path

from mwrun.terminal import colour_for, paint

LOG_BYTES = 10 * 2**20
LOG_BACKUPS = 3


def _file(path: Path) -> RotatingFileHandler:
    handler = RotatingFileHandler(path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS,
                                  encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


class Printer:
    def __init__(self, names: list[str], stream, colour: bool, run_dir: Path):
        self.stream = stream
        self.colour = colour
        self.width = max(len(n) for n in [*names, "mwrun"])
        self.colours = {name: colour_for(i) for i, name in enumerate(names)}
        self.logs = {name: _file(run_dir / "logs" / f"{name}.log") for name in names}
        self.events = _file(run_dir / "events.log")

    def line(self, name: str, text: str) -> None:
        self._show(paint(name.ljust(self.width), self.colours.get(name), self.colour), text)
        self.logs[name].emit(logging.makeLogRecord({"msg": text}))

    def event(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        self._show(paint("mwrun".ljust(self.width), 1, self.colour), text)
        self.events.emit(logging.makeLogRecord({"msg": f"{stamp} {text}"}))

    def _show(self, prefix: str, text: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(f"{prefix} | {text}\n")
            self.stream.flush()
        except (OSError, ValueError):
            self.stream = None  # the terminal went away; the logs carry on

    def close(self) -> None:
        for handler in [*self.logs.values(), self.events]:
            handler.close()
