"""The head's console: every process's lines shown prefixed with its name, and kept in
``logs/NAME.log`` (rotated at a size cap, so a chatty job cannot fill the disk); mwrun's
own events likewise, in ``events.log``.

The log files get every line as the process wrote it. The terminal gets what it can
take: it is written by a thread of its own from a bounded buffer, so a terminal
nobody reads (``mwrun launch ... | sleep 90``, a paused ssh session) never blocks the
supervisor; lines that do not fit are dropped, and a notice says how many. Lines shown
there are cleaned of control sequences other than colours, so a child cannot retitle
the terminal, move its cursor or clear it.
"""

from __future__ import annotations

import collections
import io
import logging
import os
import re
import select
import stat
import threading
import time
from logging.handlers import RotatingFileHandler
from pathlib import Path

from mwrun.schema import LOG_BACKUPS
from mwrun.terminal import colour_for, paint

LOG_BYTES = 10 * 2**20
CONSOLE_BYTES = 1 << 20  # what may wait for a slow terminal before lines are dropped
CLOSE_WAIT = 1.0  # seconds the last lines may take to reach the terminal at the end

# Every control sequence but colour (SGR: ESC [ digits and ';' then 'm'): other CSI
# sequences (cut short ones too), 8-bit CSI, OSC/DCS/SOS/PM/APC strings up to their
# end, two-character ESC sequences, and C0/C1 controls other than tab. One pass, no
# callback: what is left of ESC [ is colour.
_CONTROL = re.compile(
    r"\x1b\[(?![0-9;:]*m)[0-?]*[ -/]*[@-~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|\x1b[\]PX^_].*?(?:\x07|\x1b\\|$)|[\x90\x98\x9d\x9e\x9f].*?(?:\x07|\x9c|$)"
    r"|\x1b(?!\[)[ -/]*[0-~]?"
    r"|[\x00-\x08\x0a-\x1a\x1c-\x1f\x7f-\x9f]",
    re.DOTALL)


def clean(text: str) -> str:
    """A line safe to show: colours (SGR) kept and reset at its end, every other
    control sequence removed; after a carriage return only what a terminal would
    finally show (a progress bar's last state)."""
    if "\r" in text:
        text = next((part for part in reversed(text.split("\r")) if part), "")
    text = _CONTROL.sub("", text)
    return text + "\x1b[0m" if "\x1b[" in text else text


def _file(path: Path) -> RotatingFileHandler:
    handler = RotatingFileHandler(path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS,
                                  encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


def _emit(handler: RotatingFileHandler, body: str) -> None:
    """Lines (joined by newlines) to a log, in a few writes: per line, the handler's
    rollover check and flush would cost more than everything else the loop does. A
    write stays well under the size cap, so a file never grows past it."""
    most = min(64 * 1024, LOG_BYTES // 8)
    start = 0
    while start < len(body):
        end = len(body)
        if end - start > most:
            end = body.rfind("\n", start, start + most)
            if end <= start:  # one line longer than a write: whole, all the same
                end = body.find("\n", start + most)
                end = len(body) if end < 0 else end
        handler.emit(logging.makeLogRecord({"msg": body[start:end]}))
        start = end + 1


class Terminal:
    """Text to a terminal (or pipe) without ever blocking the caller.

    A writer thread does the blocking writes, straight to the descriptor (no Python
    buffer lock to hold). ``write`` only queues; past CONSOLE_BYTES it drops and
    counts, and ``dropped()`` hands the count over once there is room again.
    """

    def __init__(self, fd: int, encoding: str):
        self.fd = fd
        self.encoding = encoding
        self.queue: collections.deque[bytes] = collections.deque()
        self.queued = 0
        self.lost = 0
        self.gone = False
        self.cond = threading.Condition()
        threading.Thread(target=self._pump, name="mwrun-console", daemon=True).start()

    def write(self, text: str, lines: int) -> None:
        data = text.encode(self.encoding, "replace")
        with self.cond:
            if self.gone:
                return
            if self.queued + len(data) > CONSOLE_BYTES:
                self.lost += lines
                return
            self.queue.append(data)
            self.queued += len(data)
            self.cond.notify()

    def dropped(self) -> int:
        """Lines dropped since the last call, once the terminal has caught up enough
        to show a notice; else 0."""
        with self.cond:
            if not self.lost or self.queued > CONSOLE_BYTES // 2:
                return 0
            lost, self.lost = self.lost, 0
            return lost

    def _pump(self) -> None:
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                data = b"".join(self.queue)
                self.queue.clear()
            try:
                view = memoryview(data)
                while view:
                    try:
                        view = view[os.write(self.fd, view):]
                    except BlockingIOError:  # someone made the descriptor non-blocking
                        select.select([], [self.fd], [], 1.0)
            except OSError:
                with self.cond:  # the terminal went away; the logs carry on
                    self.gone, self.queued = True, 0
                    self.cond.notify_all()
                return
            with self.cond:
                self.queued -= len(data)
                self.cond.notify_all()

    def close(self, timeout: float) -> None:
        """Let the last lines out, waiting at most ``timeout``: nobody may be reading."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.queued and not self.gone and time.monotonic() < deadline:
                self.cond.wait(max(deadline - time.monotonic(), 0.0))


class Printer:
    """``names``: the processes of the job (a scaled process's new replicas get their
    prefix and log file when they first speak); ``widest``: the longest name it may
    ever show, so the prefixes line up."""

    def __init__(self, names: list[str], stream, colour: bool, run_dir: Path,
                 widest: int = 0):
        self.stream = stream
        self.colour = colour
        self.run_dir = run_dir
        self.width = max(widest, *(len(n) for n in [*names, "mwrun"]))
        self.prefixes: dict[str, str] = {}
        self.logs: dict[str, RotatingFileHandler] = {}
        for name in names:
            self._open(name)
        self.own = paint("mwrun".ljust(self.width), 1, colour) + " | "
        self.events = _file(run_dir / "events.log")
        self.terminal = _terminal(stream)

    def _open(self, name: str) -> None:
        self.prefixes[name] = paint(name.ljust(self.width), colour_for(len(self.prefixes)),
                                    self.colour) + " | "
        self.logs[name] = _file(self.run_dir / "logs" / f"{name}.log")

    def line(self, name: str, text: str) -> None:
        self.lines(name, [text])

    def lines(self, name: str, texts: list[str]) -> None:
        """Lines of process ``name``: all to its log as written, cleaned to the console."""
        if not texts:
            return
        body = "\n".join(texts)
        if name not in self.logs:  # a replica added while the job runs
            self._open(name)
        _emit(self.logs[name], body)
        prefix = self.prefixes[name]
        if not all(text.isprintable() for text in texts):  # cheaper than a regex scan
            body = "\n".join(clean(text) for text in texts)
        self._show(prefix + body.replace("\n", "\n" + prefix) + "\n", len(texts))

    def event(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        self._show(f"{self.own}{clean(text)}\n", 1)  # it may quote a process's words
        self.events.emit(logging.makeLogRecord({"msg": f"{stamp} {text}"}))

    def _show(self, text: str, count: int) -> None:
        if self.terminal is not None:
            lost = self.terminal.dropped()
            if lost:
                self.terminal.write(f"{self.own}{lost} line{'s' * (lost != 1)} not shown:"
                                    " the console could not keep up (the logs have them)\n",
                                    1)
            self.terminal.write(text, count)
            return
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.stream = None  # the terminal went away; the logs carry on

    def close(self) -> None:
        if self.terminal is not None:
            self.terminal.close(CLOSE_WAIT)
        for handler in [*self.logs.values(), self.events]:
            handler.close()


class RotatedOutput:
    """The console of a detached supervisor: its stdout and stderr (fds 1 and 2, a
    file), renamed to ``NAME.1`` and started afresh each time it reaches LOG_BYTES, so
    that it never grows without bound while tracebacks still land in the current file."""

    def __init__(self, path: Path, fds: tuple[int, ...] = (1, 2)):
        self.path = path
        self.fds = fds
        self.size = os.fstat(fds[0]).st_size

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        if self.size and self.size + len(data) > LOG_BYTES:
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            for target in self.fds:
                os.dup2(fd, target)
            os.close(fd)
            self.size = 0
        view = memoryview(data)
        while view:
            view = view[os.write(self.fds[0], view):]
        self.size += len(data)

    def flush(self) -> None:
        pass


def _terminal(stream) -> Terminal | None:
    """A non-blocking writer for a stream with a descriptor (a terminal, a pipe); None
    for in-memory streams and files, written directly."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return None  # a regular file takes every line without blocking
    try:
        stream.flush()  # what was written through the stream goes first
    except (OSError, ValueError):
        return None
    return Terminal(fd, getattr(stream, "encoding", None) or "utf-8")
