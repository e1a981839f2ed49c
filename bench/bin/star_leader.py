"""Rank 0 of every world: receives from each world's worker, one thread per world, and
prints every --tick seconds how many tensors each world has delivered so far."""

import json
import threading
import time

import torch

import mwrun

counts: dict[str, int] = {}


def serve(world):
    t = torch.zeros(256)
    while True:
        try:
            world.recv(t, 1)
            counts[world.name] += 1
        except mwrun.BrokenWorldError:
            world.rejoin()


job = mwrun.init()
for name, world in job.worlds.items():
    counts[name] = 0
    threading.Thread(target=serve, args=(world,), daemon=True).start()
while True:
    time.sleep(0.2)
    print(json.dumps({"e": "tick", "t": time.monotonic(), "counts": dict(counts)}), flush=True)
