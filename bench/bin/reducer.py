"""One member of a world that all_reduces 4 floats every --interval seconds, quietly,
until stopped; a broken world is rejoined. A drill can make it late (--signal SLOW)."""

import argparse
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--interval", type=float, default=0.02)
args = parser.parse_args()

job = mwrun.init()
[world] = job.worlds.values()
value = torch.ones(4)
while True:
    time.sleep(args.interval)
    try:
        world.all_reduce(value)
    except mwrun.BrokenWorldError:
        world.rejoin()
