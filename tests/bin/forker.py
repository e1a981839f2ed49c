"""Leaves a grandchild in its process group, one that ignores SIGTERM, and writes
its pid to the file named first.

    forker.py PIDFILE --exit   then print a line and SIGKILL itself at once
    forker.py PIDFILE          then wait to be terminated (SIGTERM ends it)

The line before the SIGKILL is printed without a flush: it reaches the log only if
the output is unbuffered.
"""

import os
import signal
import sys
import time

pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.closerange(0, 3)  # holds no pipe of ours: only its group ties it to the job
    time.sleep(600)
    os._exit(0)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(str(pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
if "--exit" in sys.argv:
    print("last words before SIGKILL")
    os.kill(os.getpid(), signal.SIGKILL)
while True:
    time.sleep(1)
