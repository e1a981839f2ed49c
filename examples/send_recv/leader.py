"""The send/recv leader: receives from one worker in each of its worlds, concurrently.

Under mwrun launch (configs/star.yaml) the worlds come from the launcher. By hand, one
terminal per process, as in MultiWorld's example:

    python examples/send_recv/leader.py --worldinfo 1,0 --worldinfo 2,0
    python examples/send_recv/worker.py --worldinfo 1,1
    python examples/send_recv/worker.py --worldinfo 2,1

When a world breaks (its worker crashed, hung or was killed) the leader says so,
keeps receiving through its other worlds, and waits for the broken one to re-form.
"""

import argparse
import asyncio
import os

import torch

import mwrun


async def serve(world: mwrun.World, device) -> int:
    """Receive from rank 1 until the world closes for good; returns how many arrived."""
    received = 0
    while True:
        tensor = torch.zeros(1, device=device)
        try:
            await world.irecv(tensor, 1)
        except mwrun.BrokenWorldError as exc:
            print(f"{world.name} broke: {exc.reason}; waiting for it to re-form", flush=True)
            try:
                await asyncio.to_thread(world.rejoin)
            except mwrun.BrokenWorldError as final:
                print(f"{world.name} is over: {final.reason}", flush=True)
                return received
            print(f"{world.name} re-formed (generation {world.generation})", flush=True)
            continue
        received += 1
        print(f"received {tensor} from rank 1 in {world.name}", flush=True)


async def main(args) -> None:
    worlds = None if "MWRUN_WORLDS" in os.environ else mwrun.from_worldinfo(
        args.worldinfo, size=2, addr=args.addr, backend=args.backend, base_port=args.base_port)
    job = mwrun.init(worlds=worlds)
    device = next(iter(job.worlds.values())).device
    counts = await asyncio.gather(*(serve(w, device) for w in job.worlds.values()))
    for world, count in zip(job.worlds, counts, strict=True):
        print(f"{world}: received {count} tensors", flush=True)
    job.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--addr", default="127.0.0.1")
    parser.add_argument("--base-port", type=int, default=29500,
                        help="by hand: world W's store is on BASE_PORT + 1000*W")
    parser.add_argument("--worldinfo", action="append", default=[],
                        help="WORLD,RANK by hand (repeat for each world)")
    asyncio.run(main(parser.parse_args()))
