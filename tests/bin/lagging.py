"""A member of one world that all_reduces in a loop, every --interval seconds; with
--late S it comes S seconds late to every call (the member its peers wait for)."""

import argparse
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--interval", type=float, default=0.02)
parser.add_argument("--late", type=float, default=0.0)
args = parser.parse_args()

job = mwrun.init()
[world] = job.worlds.values()
while True:
    time.sleep(args.interval + args.late)  # the others wait for it in the all_reduce
    try:
        world.all_reduce(torch.ones(4))
    except mwrun.BrokenWorldError:
        world.rejoin()
