"""One member of a two-member world: rank 1 sends rank 0 a number every --interval
seconds, quietly, until stopped; a broken world is rejoined. For jobs of hundreds.
With --out, rank 0 writes the last number it received there (replaced whole, so a
reader never sees half a number): outside mwrun, the world is seen to work."""

import argparse
import os
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--interval", type=float, default=2.0)
parser.add_argument("--out")
args = parser.parse_args()

job = mwrun.init()
[world] = job.worlds.values()
value = torch.zeros(1)
while True:
    try:
        if world.rank == 1:
            world.send(value, 0)
            value += 1
            time.sleep(args.interval)
        else:
            world.recv(value, 1)
            if args.out:
                with open(args.out + ".tmp", "w") as file:
                    file.write(str(int(value.item())))
                os.replace(args.out + ".tmp", args.out)
    except mwrun.BrokenWorldError:
        world.rejoin()
