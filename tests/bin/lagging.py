"""A member of one world that all_reduces in a loop, every --interval seconds; with
--late S it comes S seconds late to every call (the member its peers wait for), while
the file --late-while names exists (default: ever). With --events it prints each
``slow`` event of job.events() as a JSON line."""

import argparse
import json
import os
import threading
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--interval", type=float, default=0.02)
parser.add_argument("--late", type=float, default=0.0)
parser.add_argument("--late-while", default=None)
parser.add_argument("--events", action="store_true")
args = parser.parse_args()


def follow():
    for event in job.events():
        if event.kind == "slow":
            print(json.dumps({"event": "slow", "world": event.world, "member": event.member,
                              "lag_s": event.lag_s, "reason": event.reason}), flush=True)


job = mwrun.init()
[world] = job.worlds.values()
if args.events:
    threading.Thread(target=follow, daemon=True).start()
while True:
    late = args.late if args.late_while is None or os.path.exists(args.late_while) else 0.0
    time.sleep(args.interval + late)  # the others wait for it in the all_reduce
    try:
        world.all_reduce(torch.ones(4))
    except mwrun.BrokenWorldError:
        world.rejoin()
