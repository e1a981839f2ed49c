"""Rank 1 of a two-rank world: sends step numbers to rank 0 until the world ends."""

import argparse
import json
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--world", required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--timeout", type=float, default=20)
parser.add_argument("--interval", type=float, default=0.0)
parser.add_argument("--count", type=int, default=0, help="0: forever")
parser.add_argument("--then-all-reduce", action="store_true")
args = parser.parse_args()

job = mwrun.init(worlds={args.world: mwrun.WorldSpec(rank=1, size=2, port=args.port,
                                                     timeout=args.timeout)})
w = job.world(args.world)
print(json.dumps({"formed": w.generation}), flush=True)
step = 0
try:
    while args.count == 0 or step < args.count:
        w.send(torch.full((4,), float(step)), 0)
        step += 1
        if args.interval:
            time.sleep(args.interval)
    if args.then_all_reduce:
        t = torch.tensor([2.0])
        w.all_reduce(t)
        print(json.dumps({"all_reduce": t.item()}), flush=True)
except mwrun.BrokenWorldError as exc:
    print(json.dumps({"broken": exc.reason}), flush=True)
job.close()
