"""A child's output as lines: bytes in, whole decoded lines out.

Used wherever a child's pipe is read (the head locally, an agent on a remote host), so
that a line is never split or held without bound.
"""

from __future__ import annotations

LONGEST_LINE = 64 * 1024  # a line without newline is cut here rather than held forever


class LineBuffer:
    """Bytes in, whole decoded lines out."""

    def __init__(self):
        self._pending = b""

    def feed(self, data: bytes) -> list[str]:
        self._pending += data
        end = self._pending.rfind(b"\n")
        lines: list[str] = []
        if end >= 0:
            # One decode and one split for every whole line of the read: per line, they
            # would cost the supervisor more than the reading itself.
            text = self._pending[:end].decode("utf-8", "replace")
            self._pending = self._pending[end + 1:]
            lines = text.split("\n")
            if "\r" in text:
                lines = [line.rstrip("\r") for line in lines]
        if len(self._pending) > LONGEST_LINE:
            lines.append(self._pending.decode("utf-8", "replace"))
            self._pending = b""
        return lines

    def flush(self) -> list[str]:
        rest, self._pending = self._pending, b""
        return [rest.decode("utf-8", "replace")] if rest else []
