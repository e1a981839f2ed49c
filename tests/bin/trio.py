"""A world of three: rank 0 waits on rank 1, ranks 1 and 2 sit in a barrier.

Nobody's peer dies; the world is broken through its store (as the supervisor does),
so every blocked call must end through mwrun's abort, not a socket error.
"""

import argparse
import json
import os
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--port", type=int, required=True)
args = parser.parse_args()

job = mwrun.init(worlds={"w": mwrun.WorldSpec(rank=args.rank, size=3, port=args.port,
                                              timeout=60)})
w = job.world("w")
w.barrier()
print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
try:
    if args.rank == 0:
        w.recv(torch.zeros(1), 1)
    else:
        w.barrier()
    print(json.dumps({"completed": True}), flush=True)
except mwrun.BrokenWorldError as exc:
    print(json.dumps({"broken_at": time.monotonic(), "reason": exc.reason}), flush=True)
job.close()
