"""One member of a two-member world that says, outside mwrun, that the world works:
rank 1 sends rank 0 a count every --interval seconds; rank 0 writes the last count it
received to --out (replaced whole, so a reader never sees half a number). A broken
world is rejoined."""

import argparse
import os
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--interval", type=float, default=0.05)
parser.add_argument("--out", required=True)
args = parser.parse_args()

job = mwrun.init()
[world] = job.worlds.values()
value = torch.zeros(1)
while True:
    try:
        if world.rank == 1:
            value += 1
            world.send(value, 0)
            time.sleep(args.interval)
        else:
            world.recv(value, 1)
            with open(args.out + ".tmp", "w") as file:
                file.write(str(int(value.item())))
            os.replace(args.out + ".tmp", args.out)
    except mwrun.BrokenWorldError:
        world.rejoin()
