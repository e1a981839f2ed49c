"""A member whose abort of a broken world never returns (a stand-in for a hung
ncclCommAbort, on gloo so it runs anywhere).

Role ``stuck`` (rank 0): its first incarnation replaces its group's abort by one that
never returns, with a 1 s deadline, and receives until the world breaks; the
supervisor must then kill it and restart it. Later incarnations say so and leave.
Role ``peer`` (rank 1): sends until the world breaks (it is killed for that).
"""

import json
import os
import sys
import threading

import torch

import mwrun
from mwrun.worlds import nccl


def say(**fields):
    print(json.dumps(fields), flush=True)


job = mwrun.init()
world = job.world("w")
restart = int(os.environ.get("MWRUN_RESTART_COUNT", "0"))
say(event="formed", role=sys.argv[1], restart=restart)
if restart > 0:  # the restarted members: the world re-formed, done
    say(event="restarted", restart=restart)
    # Neither leaves before the other has its group: the first to return from init
    # would otherwise close its end while the other may still be connecting to it.
    world.barrier()
    job.close()
    raise SystemExit(0)
if sys.argv[1] == "stuck":
    nccl.ABORT_DEADLINE = 1.0
    world.membership.state.group._abort = threading.Event().wait  # never returns
value = torch.zeros(1)
try:
    while True:
        world.send(value, 0) if world.rank == 1 else world.recv(value, 1)
except mwrun.BrokenWorldError as error:
    say(event="broke", reason=error.reason)
    if sys.argv[1] == "stuck":
        threading.Event().wait(60)  # the supervisor kills it before this ends
    job.close()
