"""Rank 1 of one world: sends a counter to rank 0 every --interval (on a fixed
schedule, so its rate is known); can crash on purpose."""

import argparse
import json
import os
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--interval", type=float, default=0.05)
parser.add_argument("--count", type=int, default=0, help="0: until killed")
parser.add_argument("--crash-after", type=float, help="seconds, then exit --crash-code")
parser.add_argument("--crash-code", type=int, default=3)
parser.add_argument("--crash-restarts", type=int, default=1,
                    help="crash only while MWRUN_RESTART_COUNT is below this")
parser.add_argument("--numel", type=int, default=1, help="float32 elements per message")
parser.add_argument("--send-pid", action="store_true", help="send its pid, not a counter")
parser.add_argument("--rejoin", action="store_true", help="rejoin a broken world, go on")
args = parser.parse_args()

print(json.dumps({"event": "init", "t": time.time()}), flush=True)
job = mwrun.init()
[world] = job.worlds.values()
started = time.monotonic()
crashing = int(os.environ["MWRUN_RESTART_COUNT"]) < args.crash_restarts
step = 0
while args.count == 0 or step < args.count:
    if crashing and args.crash_after is not None and \
            time.monotonic() - started >= args.crash_after:
        print(f"crashing with code {args.crash_code}", flush=True)
        os._exit(args.crash_code)
    value = float(os.getpid() if args.send_pid else step)
    try:
        world.send(torch.full((args.numel,), value), 0)
    except mwrun.BrokenWorldError:
        if not args.rejoin:
            raise
        world.rejoin()
    step += 1
    time.sleep(max(started + step * args.interval - time.monotonic(), 0))
job.close()
