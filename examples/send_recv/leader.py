"""The send/recv leader: receives from one worker in each of its worlds, concurrently.

Under mwrun launch (configs/star.yaml) the worlds come from the launcher. By hand, one
terminal per process, as in MultiWorld's example:

    python examples/send_recv/leader.py --worldinfo 1,0 --worldinfo 2,0
    python examples/send_recv/worker.py --worldinfo 1,1
    python examples/send_recv/worker.py --worldinfo 2,1

When a world breaks (its worker crashed, hung or was killed) the leader says so,
keeps receiving through its other worlds, and waits for the broken one to re-form
(common.py).
"""

import argparse
import asyncio
import pathlib
import sys

import torch

import mwrun

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import add_arguments, arecover, quiet_interrupt, say, worlds


async def serve(world: mwrun.World, device) -> int:
    """Receive from rank 1 until the world closes for good; returns how many arrived."""
    received = 0
    while True:
        tensor = torch.zeros(1, device=device)
        try:
            await world.irecv(tensor, 1)
        except mwrun.BrokenWorldError as exc:
            if not await arecover(world, exc):
                return received
            continue
        received += 1
        say(f"received {tensor} from rank 1 in {world.name}")


async def main(args) -> None:
    with mwrun.init(worlds=worlds(args, size=2)) as job:  # closed on Ctrl-C too
        device = next(iter(job.worlds.values())).device
        counts = await asyncio.gather(*(serve(w, device) for w in job.worlds.values()))
        for world, count in zip(job.worlds, counts, strict=True):
            say(f"{world}: received {count} tensors")


if __name__ == "__main__":
    parser = add_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    quiet_interrupt(lambda: asyncio.run(main(parser.parse_args())))
