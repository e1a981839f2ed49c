"""A plain CUDA process under mwrun: what it was given, and that CUDA works in it.

Prints one JSON line. ``--fail-first``: the first incarnation exits 1 after printing
(so the launcher restarts it); later ones stay until stopped."""

import json
import os
import sys
import time

import torch

from mwrun.worlds import nccl

seen = {
    "event": "pinned",
    "restart": int(os.environ.get("MWRUN_RESTART_COUNT", "0")),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "local_rank": os.environ.get("LOCAL_RANK"),
    "error_handling": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"),
    # forked from a zygote that had initialised CUDA, torch would say so here
    "bad_fork": torch.cuda._is_in_bad_fork(),
    "initialized_at_start": torch.cuda.is_initialized(),
    "nccl": nccl.version(),
}
seen["initialized_by_version"] = torch.cuda.is_initialized()  # must stay False
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(4, device="cuda")
seen.update(device_count=torch.cuda.device_count(), device=torch.cuda.current_device(),
            sum=float((x * 2).sum().item()))
print(json.dumps(seen), flush=True)
if "--fail-first" in sys.argv and seen["restart"] == 0:
    sys.exit(1)
if "--stay" in sys.argv:
    time.sleep(3600)
