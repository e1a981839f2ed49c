"""One process in several worlds: --world NAME:RANK:SIZE:PORT (repeatable).

In each world, all_reduce (rank + 1) and all_gather the process names; prints JSON.
"""

import argparse
import json

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--name", required=True)
parser.add_argument("--world", action="append", required=True)
args = parser.parse_args()

specs = {}
for item in args.world:
    name, rank, size, port = item.split(":")
    specs[name] = mwrun.WorldSpec(rank=int(rank), size=int(size), port=int(port), timeout=20)
job = mwrun.init(worlds=specs)
for name, w in sorted(job.worlds.items()):
    t = torch.tensor([w.rank + 1.0])
    w.all_reduce(t)
    ranks = [torch.zeros(1) for _ in range(w.size)]
    w.all_gather(ranks, torch.tensor([float(w.rank)]))
    print(json.dumps({"process": args.name, "world": name, "rank": w.rank, "sum": t.item(),
                      "ranks": [x.item() for x in ranks]}), flush=True)
job.close()
