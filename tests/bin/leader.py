"""Rank 0 of worlds w1 and w2: receives from both; reports how w1 breaks and w2 fares."""

import argparse
import json
import threading
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--p1", type=int, required=True)
parser.add_argument("--p2", type=int, required=True)
parser.add_argument("--timeout", type=float, default=20)
parser.add_argument("--rejoin", action="store_true")
args = parser.parse_args()


def say(**fields):
    print(json.dumps(fields), flush=True)


job = mwrun.init(worlds={
    "w1": mwrun.WorldSpec(rank=0, size=2, port=args.p1, timeout=args.timeout),
    "w2": mwrun.WorldSpec(rank=0, size=2, port=args.p2, timeout=args.timeout)})
w1, w2 = job.world("w1"), job.world("w2")
stamps: list[float] = []
stop = threading.Event()


def w2_loop():
    t = torch.zeros(4)
    while not stop.is_set():
        w2.recv(t, 1)
        stamps.append(time.monotonic())


thread = threading.Thread(target=w2_loop)
thread.start()
t = torch.zeros(4)
w1.recv(t, 1)
say(ready=True)
try:
    while True:
        w1.recv(t, 1)
except mwrun.BrokenWorldError as exc:
    broken_at = time.monotonic()
    say(broken_at=broken_at, reason=exc.reason, world=exc.world, generation=exc.generation)
try:
    w1.recv(t, 1)
except mwrun.BrokenWorldError:
    say(again_raises=True)
# w2 goes on through w1's break: a few of its calls complete after it (how many a
# second, beside a world untouched: bench/supervisor.py).
deadline = time.monotonic() + 60
while sum(1 for s in stamps if s > broken_at) < 5 and time.monotonic() < deadline:
    time.sleep(0.01)
say(w2_after_break=sum(1 for s in stamps if s > broken_at))
if args.rejoin:
    w1.rejoin(timeout=60)
    say(rejoined=w1.generation)
    w1.recv(t, 1)
    say(after_rejoin=t.tolist())
stop.set()
thread.join()
job.close()
say(done=True)
