"""The comparison job: every rank all_reduces a 1 KiB tensor in a loop.

``--api torch``: plain torch.distributed, as under torchrun (a failure kills the rank).
``--api mwrun``: the same loop on an mwrun world; a rank that sees the world break
rejoins it and carries on. Prints JSON lines: ``start`` before anything else,
``first`` after a process's first all_reduce, ``resumed`` after the first one that
completes after a break, and a ``tick`` with the running count every --tick seconds.
"""

import argparse
import json
import os
import sys
import time


def say(**fields):
    # One write per line: ranks under torchrun share one pipe, and two writes (text,
    # then newline) from two ranks can interleave.
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", choices=("torch", "mwrun"), required=True)
    parser.add_argument("--tick", type=float, default=0.2)
    args = parser.parse_args()
    rank, pid = int(os.environ["RANK"]), os.getpid()
    say(e="start", rank=rank, pid=pid, t=time.monotonic())  # before torch: count starts
    import torch

    if args.api == "torch":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        broken = ()

        def all_reduce(t):
            dist.all_reduce(t)
    else:
        import mwrun

        world = next(iter(mwrun.init().worlds.values()))
        broken = (mwrun.BrokenWorldError,)

        def all_reduce(t):
            world.all_reduce(t)
    t = torch.ones(256)
    count, event, last_tick = 0, "first", 0.0
    while True:
        try:
            all_reduce(t)
        except broken:
            world.rejoin()
            event = "resumed"
            continue
        count += 1
        now = time.monotonic()
        if event:
            say(e=event, rank=rank, pid=pid, t=now)
            event = None
        if now - last_tick >= args.tick:
            say(e="tick", rank=rank, pid=pid, n=count, t=now)
            last_tick = now


if __name__ == "__main__":
    main()
