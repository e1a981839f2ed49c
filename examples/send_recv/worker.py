"""The send/recv worker: rank 1 of one world, sends a tensor to the leader every tick."""

import argparse
import os
import pathlib
import sys
import time

import torch

import mwrun

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import add_arguments, quiet_interrupt, recover, worlds


def main(args) -> None:
    job = mwrun.init(worlds=worlds(args, size=2))
    [world] = job.worlds.values()
    restart = os.environ.get("MWRUN_RESTART_COUNT", "0")
    print(f"{world.name}: rank {world.rank} of {world.size}, generation {world.generation},"
          f" restart {restart}", flush=True)
    step = 0
    while args.steps == 0 or step < args.steps:
        tensor = torch.full((1,), float(step), device=world.device)
        try:
            world.send(tensor, 0)
        except mwrun.BrokenWorldError as exc:  # the leader went (by hand: for good)
            if not recover(world, exc):
                break
            continue
        print(f"{world.name}: sent {tensor}", flush=True)
        step += 1
        time.sleep(args.interval)
    job.close()


if __name__ == "__main__":
    parser = add_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--steps", type=int, default=60, help="tensors to send (0: until stopped)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between sends")
    quiet_interrupt(lambda: main(parser.parse_args()))
