"""One member of a two-member world: rank 1 sends rank 0 a number every --interval
seconds, quietly, until stopped; a broken world is rejoined. For jobs of hundreds."""

import argparse
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--interval", type=float, default=2.0)
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
    except mwrun.BrokenWorldError:
        world.rejoin()
