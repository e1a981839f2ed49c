"""asyncio: rank 0 of w1 and w2 awaits receives from both worlds at once."""

import argparse
import asyncio
import json

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--p1", type=int, required=True)
parser.add_argument("--p2", type=int, required=True)
parser.add_argument("--count", type=int, required=True)
args = parser.parse_args()


async def receive(w, count):
    values = []
    for _ in range(count):
        t = torch.zeros(4)
        await w.irecv(t, 1)
        values.append(t[0].item())
    t = torch.tensor([1.0])
    await w.all_reduce(t, async_op=True)
    return values, t.item()


async def main():
    job = mwrun.init(worlds={"w1": mwrun.WorldSpec(rank=0, size=2, port=args.p1),
                             "w2": mwrun.WorldSpec(rank=0, size=2, port=args.p2)})
    (v1, s1), (v2, s2) = await asyncio.gather(receive(job.world("w1"), args.count),
                                              receive(job.world("w2"), args.count))
    print(json.dumps({"w1": v1, "w2": v2, "sums": [s1, s2]}), flush=True)
    job.close()


asyncio.run(main())
