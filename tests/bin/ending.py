"""Ends the way --how says: code N, an exception, SystemExit with a message, a signal."""

import os
import signal
import sys

how = sys.argv[1]
print(f"ending by {how}", flush=True)
if how == "code":
    sys.exit(3)
if how == "message":
    sys.exit("a message for stderr")
if how == "exception":
    raise ValueError("uncaught")
if how == "interrupt":
    raise KeyboardInterrupt
if how == "signal":
    os.kill(os.getpid(), signal.SIGTERM)
    signal.pause()
if how == "segfault":  # a native crash, in a function of this script
    import ctypes

    def crash():
        ctypes.string_at(0)

    crash()
