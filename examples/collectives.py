"""The six collective examples' common driver: MultiWorld's m8d.py examples on mwrun.

Every process runs STEPS steps of one collective in each world it is in (one asyncio
task per world) and prints what it holds afterwards, as the originals did, then
``WORLD: done with step: N``. Values are chosen so anyone can check them: at step s,
rank r contributes tensors filled with 10*s + r.

A world that breaks ends only its own task (after trying to rejoin it); the process's
other worlds finish every step. Run under ``mwrun launch configs/OP_*.yaml``, or by
hand, one terminal per process, with MultiWorld's arguments (worlds of 3 ranks, world
W on port 29500 + 1000*W)::

    python examples/all_gather/m8d.py --worldinfo 1,0 --worldinfo 2,0   # the leader
    python examples/all_gather/m8d.py --worldinfo 1,1
    python examples/all_gather/m8d.py --worldinfo 1,2
    python examples/all_gather/m8d.py --worldinfo 2,1
    python examples/all_gather/m8d.py --worldinfo 2,2
"""

from __future__ import annotations

import argparse
import asyncio

import torch
from common import add_arguments, arecover, say, worlds

import mwrun

SIZE = 3  # ranks per world, as in the originals
WIDTH = 3  # elements per tensor


def filled(step: int, rank: int, device) -> torch.Tensor:
    return torch.full((WIDTH,), float(10 * step + rank), device=device)


async def broadcast(w: mwrun.World, step: int) -> str:
    t = filled(step, 0, w.device) if w.rank == 0 else torch.zeros(WIDTH, device=w.device)
    await w.broadcast(t, src=0, async_op=True)
    verb = "has broadcast tensor" if w.rank == 0 else "has received tensor"
    return f"rank: {w.rank} from {w.name} {verb}: {t}"


async def reduce(w: mwrun.World, step: int) -> str:
    t = filled(step, w.rank, w.device)
    await w.reduce(t, dst=0, async_op=True)
    if w.rank == 0:
        return f"rank: 0 from {w.name} has reduced tensor: {t}"
    return f"rank: {w.rank} from {w.name} has sent tensor: {filled(step, w.rank, w.device)}"


async def all_reduce(w: mwrun.World, step: int) -> str:
    t = filled(step, w.rank, w.device)
    await w.all_reduce(t, async_op=True)
    return f"rank: {w.rank} from {w.name} has all-reduced tensor: {t}"


async def all_gather(w: mwrun.World, step: int) -> str:
    tensors = [torch.zeros(WIDTH, device=w.device) for _ in range(w.size)]
    await w.all_gather(tensors, filled(step, w.rank, w.device), async_op=True)
    return f"rank: {w.rank} from {w.name} has gathered tensors: {tensors}"


async def gather(w: mwrun.World, step: int) -> str:
    tensors = [torch.zeros(WIDTH, device=w.device) for _ in range(w.size)] \
        if w.rank == 0 else None
    await w.gather(filled(step, w.rank, w.device), tensors, dst=0, async_op=True)
    if w.rank == 0:
        return f"rank: 0 from {w.name} has gathered tensors: {tensors}"
    return f"rank: {w.rank} from {w.name} has tensor: {filled(step, w.rank, w.device)}"


async def scatter(w: mwrun.World, step: int) -> str:
    pieces = [filled(step, r, w.device) for r in range(w.size)] if w.rank == 0 else None
    t = torch.zeros(WIDTH, device=w.device)
    await w.scatter(t, pieces, src=0, async_op=True)
    return f"rank: {w.rank} from {w.name} has received tensor: {t}"


OPS = {f.__name__: f for f in (broadcast, reduce, all_reduce, all_gather, gather, scatter)}


async def steps(op, world: mwrun.World, count: int, interval: float) -> None:
    step = 1
    while step <= count:
        try:
            say(await op(world, step))
        except mwrun.BrokenWorldError as exc:
            if not await arecover(world, exc, f" at step {step}"):
                return
            continue
        say(f"{world.name}: done with step: {step}")
        step += 1
        await asyncio.sleep(interval)
    world.close()  # finished: let the other members know at once


async def run(op_name: str, args) -> None:
    job = mwrun.init(worlds=worlds(args, size=SIZE))
    # Said once, so no one waits on a run without knowing for how long.
    took = round(args.steps * args.interval, 1)
    say(f"{op_name}: {args.steps} steps in {', '.join(job.worlds)}, one every"
        f" {args.interval:g}s: about {took:g}s (--steps, --interval)")
    await asyncio.gather(*(steps(OPS[op_name], w, args.steps, args.interval)
                           for w in job.worlds.values()))
    job.close()


def main(op_name: str) -> None:
    parser = add_arguments(argparse.ArgumentParser(
        description=f"{op_name} in every world of this process"))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between steps")
    asyncio.run(run(op_name, parser.parse_args()))
