"""Writes 100-byte lines to stdout as fast as the pipe takes them, until killed."""

import os

CHUNK = (b"x" * 99 + b"\n") * 1000

while True:
    os.write(1, CHUNK)
