"""A member of an elastic job, started as the launcher starts it (MWRUN_WORLDS,
MWRUN_PROCESS, MWRUN_CONTROL): it works in world --world once the job has it (from
init, or added by the head), one all_reduce after another; a break is rejoined, a
closed world ends it. Every event of the job is printed as it comes; with --release,
a draining world is let go at once. With --scale, it asks the supervisor to scale
instead, and prints the answers. JSON lines."""

import argparse
import json
import sys
import threading
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--world", default="pair")
parser.add_argument("--release", action="store_true")
parser.add_argument("--scale", action="store_true")
args = parser.parse_args()


said_lock = threading.Lock()


def say(**fields):
    """One whole line at a time: two threads say things."""
    with said_lock:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


job = mwrun.init()
if args.scale:
    say(scaled=job.scale("worker", "+1"))
    try:
        job.scale("worker", 9)
    except mwrun.MwrunError as exc:
        say(refused=str(exc))
    job.close()
    raise SystemExit(0)

ready = threading.Event()
if args.world in job.worlds:
    ready.set()


def hear():
    for e in job.events():
        say(event=e.kind.value, world=e.world, generation=e.generation, reason=e.reason)
        if e.kind == "added" and e.world == args.world:
            ready.set()
        if e.kind == "draining" and args.release:
            say(released=e.world, let_go=job.world(e.world).release())


listener = threading.Thread(target=hear)
listener.start()
ready.wait()
w = job.world(args.world)
said = None
while True:
    try:
        t = torch.ones(1)
        w.all_reduce(t)
        if w.generation != said:
            said = w.generation
            say(call=w.generation, rank=w.rank, size=w.size, sum=t.item())
        time.sleep(0.01)  # pace, so that three processes share two cores
    except mwrun.BrokenWorldError as exc:
        say(broken=exc.reason, generation=exc.generation)
        w.rejoin()
        say(rejoined=w.generation, rank=w.rank, size=w.size)
    except mwrun.WorldClosedError as exc:
        try:
            w.rejoin()
            again = False
        except mwrun.WorldClosedError as error:  # the same, at once
            again = error is exc
        say(closed=exc.reason, generation=exc.generation, in_worlds=args.world in job.worlds,
            draining=w.draining, rejoin_raises_it=again)
        break
job.close()
listener.join()
