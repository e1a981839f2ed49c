"""Rank 1 of world w: joins, takes part in one all_reduce, then waits to be killed."""

import json
import os
import threading

import torch

import mwrun

job = mwrun.init()
job.world("w").all_reduce(torch.ones(1))
print(json.dumps({"event": "member", "pid": os.getpid()}), flush=True)
threading.Event().wait()
