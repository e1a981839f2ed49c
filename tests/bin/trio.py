"""A world of three: rank 0 waits on rank 1, ranks 1 and 2 sit in a barrier.

Nobody's peer dies; the world is broken through its store (as the supervisor does),
so every blocked call must end through mwrun's abort, not a socket error.
"""

import argparse
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

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
# Rank 0 hosts the store by hand: it stays until the others have read the break there,
# or a busy machine lets it take the store away first ("lost the world's store").
done = dist.TCPStore("127.0.0.1", args.port, None, False, timeout=timedelta(seconds=30))
done.set(f"trio/done/{args.rank}", "1")
if args.rank == 0:
    done.wait(["trio/done/1", "trio/done/2"])
job.close()
