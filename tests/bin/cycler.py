"""A member that keeps calling, and rejoins every time its world is broken."""

import argparse
import gc
import json
import threading

import psutil
import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--cycles", type=int, required=True)
parser.add_argument("--timeout", type=float, default=5)
args = parser.parse_args()

job = mwrun.init(worlds={"w": mwrun.WorldSpec(rank=args.rank, size=2, port=args.port,
                                              timeout=args.timeout)})
w = job.world("w")
me = psutil.Process()


def usage(**fields):
    gc.collect()
    print(json.dumps({**fields, "threads": threading.active_count(),
                      "os_threads": me.num_threads(), "fds": me.num_fds(),
                      "rss": me.memory_info().rss}), flush=True)


def quiesce():
    """A generation whose gloo worker missed the abort is let go of within the timeout."""
    for thread in threading.enumerate():
        if thread.name == "mwrun-release":
            thread.join(timeout=args.timeout + 5)


def settled():
    """Both members have let go of every earlier generation: rank 0 hosts the store, so
    its descriptors count the store's end of each of its peer's connections too, and a
    peer still letting a generation go showed as 6 more (a CI pair of stop 40)."""
    quiesce()
    w.barrier()


while True:
    if w.generation == 5:  # the baseline, after warm-up (lazy imports and the like)
        settled()
        usage(baseline=True)
    usage(ready=w.generation)
    if w.generation == args.cycles:
        break
    try:
        while True:
            w.all_reduce(torch.ones(256))
    except mwrun.BrokenWorldError:
        pass
    w.rejoin(timeout=30)
settled()
usage(final=True)
w.barrier()  # neither member leaves (taking the store with it) before both measured
job.close()
