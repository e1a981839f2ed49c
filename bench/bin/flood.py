"""Writes 100-byte lines to stdout as fast as the pipe takes them, until killed.

    flood.py            plain lines
    flood.py --colour   every line full of colour sequences (work for the console's
                        cleaning), through a pipe widened to 1 MiB
"""

import contextlib
import fcntl
import os
import sys

F_SETPIPE_SZ = 1031
if "--colour" in sys.argv:
    LINE = b"\x1b[31mx\x1b[0m" * 9 + b"\n"
    with contextlib.suppress(OSError):
        fcntl.fcntl(1, F_SETPIPE_SZ, 1 << 20)
else:
    LINE = b"x" * 99 + b"\n"
CHUNK = LINE * 1000

while True:
    os.write(1, CHUNK)
