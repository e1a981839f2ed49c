"""Joins its worlds, does one all_reduce in each, says when, then leaves."""

import json
import time

import torch

import mwrun

job = mwrun.init()
for world in job.worlds.values():
    world.all_reduce(torch.ones(1))
print(json.dumps({"event": "first", "t": time.time()}), flush=True)
job.close()
