"""A plain torch.distributed script, as written for torchrun: waits for the file
--gate before init_process_group, then all_reduces until the file GATE.end exists."""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--gate", required=True)
args = parser.parse_args()


def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.05)  # the test opens the gate; nothing else to wait on


wait_for(args.gate)
print(json.dumps({"event": "init", "t": time.time()}), flush=True)
dist.init_process_group("gloo")
steps = 0
while True:  # every rank stops at the same step: once any of them sees the end gate
    end = torch.tensor([float(os.path.exists(args.gate + ".end"))])
    dist.all_reduce(end, op=dist.ReduceOp.MAX)
    steps += 1
    if end.item():
        break
    time.sleep(0.05)
print(json.dumps({"event": "done", "steps": steps}), flush=True)
dist.destroy_process_group()
