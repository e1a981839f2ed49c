"""Writes lines to stdout as fast as the pipe takes them, until killed.

The pipe is widened to 1 MiB and every line is full of colour sequences (each one
work for the console's cleaning): the reader cannot empty the pipe faster than this
fills it, so a reader that reads until the pipe is empty never stops reading.
"""

import contextlib
import fcntl
import os

F_SETPIPE_SZ = 1031
LINE = b"\x1b[31mx\x1b[0m" * 12 + b"\n"
CHUNK = LINE * 2000

with contextlib.suppress(OSError):  # a smaller pipe: the flood is less certain to win
    fcntl.fcntl(1, F_SETPIPE_SZ, 1 << 20)
while True:
    os.write(1, CHUNK)
