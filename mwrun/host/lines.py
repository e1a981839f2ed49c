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
        *lines, self._pending = self._pending.split(b"\n")
        if len(self._pending) > LONGEST_LINE:
            lines.append(self._pending)
            self._pending = b""
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines]

    def flush(self) -> list[str]:
        rest, self._pending = self._pending, b""
        return [rest.decode("utf-8", "replace")] if rest else []
