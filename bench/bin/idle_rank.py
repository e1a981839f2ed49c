"""A torch rank that joins its world, all_reduces once, says so, and idles."""

import json
import os
import threading

import torch

import mwrun

job = mwrun.init()
next(iter(job.worlds.values())).all_reduce(torch.ones(256))
print(json.dumps({"e": "idle", "pid": os.getpid()}), flush=True)
threading.Event().wait()
