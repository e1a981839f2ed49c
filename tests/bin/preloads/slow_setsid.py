"""Holds each forked child just after it has left the zygote's process group
(``os.setsid``) until the test says go: the window in which its supervisor may not have
told its watchdog of it yet, made as wide as a test needs. The child first writes
"PID SUPERVISOR" to $SETSID_MARK.PID; the test creates $SETSID_MARK.go."""

import os
import time

SUPERVISOR = os.getppid()  # the zygote's parent (its host's agent): forked children are its
MARK = os.environ["SETSID_MARK"]
_setsid = os.setsid


def setsid():
    result = _setsid()
    with open(f"{MARK}.tmp{os.getpid()}", "w") as out:
        out.write(f"{os.getpid()} {SUPERVISOR}")
    os.rename(f"{MARK}.tmp{os.getpid()}", f"{MARK}.{os.getpid()}")  # whole, or not there
    deadline = time.monotonic() + 120
    while not os.path.exists(f"{MARK}.go") and time.monotonic() < deadline:
        time.sleep(0.01)
    return result


os.setsid = setsid
