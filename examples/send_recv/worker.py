"""The send/recv worker: rank 1 of one world, sends a tensor to the leader every tick."""

import argparse
import os
import time

import torch

import mwrun


def main(args) -> None:
    worlds = None if "MWRUN_WORLDS" in os.environ else mwrun.from_worldinfo(
        args.worldinfo, size=2, addr=args.addr, backend=args.backend, base_port=args.base_port)
    job = mwrun.init(worlds=worlds)
    [world] = job.worlds.values()
    restart = os.environ.get("MWRUN_RESTART_COUNT", "0")
    print(f"{world.name}: rank {world.rank} of {world.size}, generation {world.generation},"
          f" restart {restart}", flush=True)
    for step in range(args.steps):
        tensor = torch.full((1,), float(step), device=world.device)
        world.send(tensor, 0)
        print(f"{world.name}: sent {tensor}", flush=True)
        time.sleep(args.interval)
    job.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--addr", default="127.0.0.1")
    parser.add_argument("--base-port", type=int, default=29500,
                        help="by hand: world W's store is on BASE_PORT + 1000*W")
    parser.add_argument("--worldinfo", action="append", default=[],
                        help="WORLD,RANK by hand")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between sends")
    main(parser.parse_args())
