"""What ``ps`` and /proc/PID/{cmdline,environ} show for a forked process.

A fork keeps the zygote's original argv and environment strings, which is what the
kernel shows for the process. The child rewrites that memory (as setproctitle does):
its command line as one string, and its environment as a block, while it fits in the
room the zygote was started with (argv and a padding variable make that room).
"""

from __future__ import annotations

import ctypes


class Area:
    def __init__(self, arg_start: int, arg_end: int, env_start: int, env_end: int):
        self.arg_start, self.arg_end = arg_start, arg_end
        self.env_start, self.env_end = env_start, env_end

    @classmethod
    def of_self(cls) -> Area | None:
        try:
            with open("/proc/self/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            # Fields 48-51 of stat(5), counted from 1; the list starts at field 3.
            area = cls(*(int(fields[n - 3]) for n in (48, 49, 50, 51)))
        except (OSError, IndexError, ValueError):
            return None
        return area if 0 < area.arg_start < area.arg_end <= area.env_start < area.env_end \
            else None

    def set_title(self, text: str) -> None:
        """The command line becomes ``text``; the kernel reads it up to its NUL because
        the last byte of the original argv is no longer one."""
        room = self.arg_end - self.arg_start
        data = text.encode(errors="replace")[:room - 2] + b"\0"
        _write(self.arg_start, data.ljust(room - 1, b"\0") + b" ")

    def set_environ(self, env: dict[str, str]) -> None:
        room = self.env_end - self.env_start
        block = b""
        for key, value in env.items():
            entry = f"{key}={value}".encode(errors="surrogateescape") + b"\0"
            if len(block) + len(entry) < room:
                block += entry
        _write(self.env_start, block.ljust(room, b"\0"))


def _write(address: int, data: bytes) -> None:
    ctypes.memmove(address, data, len(data))
