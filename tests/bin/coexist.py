"""A script's own default process group beside an mwrun world, in the same process."""

import argparse
import json

import torch
import torch.distributed as dist

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--default-port", type=int, required=True)
parser.add_argument("--port", type=int, required=True)
args = parser.parse_args()

dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.default_port}",
                        rank=args.rank, world_size=2)
job = mwrun.init(worlds={"mine": mwrun.WorldSpec(rank=args.rank, size=2, port=args.port)})
a = torch.tensor([1.0 + args.rank])
dist.all_reduce(a)
b = torch.tensor([10.0 * (1 + args.rank)])
job.world("mine").all_reduce(b)
c = torch.tensor([1.0])
dist.all_reduce(c)
print(json.dumps({"default": a.item(), "mwrun": b.item(), "default_again": c.item()}),
      flush=True)
job.close()
dist.destroy_process_group()
