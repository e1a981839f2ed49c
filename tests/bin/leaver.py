"""Rank 1 sends once and leaves; rank 0 sees the world break and tries to rejoin."""

import argparse
import json
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--port", type=int, required=True)
args = parser.parse_args()

job = mwrun.init(worlds={"w": mwrun.WorldSpec(rank=args.rank, size=2, port=args.port,
                                              timeout=30)})
w = job.world("w")
if args.rank == 1:
    w.send(torch.ones(1), 0)
    w.close()
    # Stay alive (not leaving by dying) until the test ends and kills us, however late
    # rank 0 (a busy machine) sees the close: the world ends by the close alone.
    time.sleep(600)
else:
    w.recv(torch.zeros(1), 1)
    try:
        w.recv(torch.zeros(1), 1)
    except mwrun.BrokenWorldError as exc:
        started = time.monotonic()
        try:
            w.rejoin(timeout=1.0)
        except mwrun.BrokenWorldError as final:
            print(json.dumps({"reason": exc.reason, "final": final.reason,
                              "rejoin_seconds": time.monotonic() - started}), flush=True)
job.close()
