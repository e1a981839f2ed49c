"""Rank 0 of world w: proves the world works (all_reduce), then blocks in a recv the
member never answers, until the member is killed; rejoins and starts over."""

import json
import time

import torch

import mwrun


def say(**fields):
    print(json.dumps(fields), flush=True)


job = mwrun.init()
w = job.world("w")
while True:
    w.all_reduce(torch.ones(1))
    say(event="ready", generation=w.generation, t=time.monotonic())
    try:
        w.recv(torch.zeros(1), 1)
    except mwrun.BrokenWorldError as exc:
        say(event="broken", t=time.monotonic(), reason=exc.reason)
    w.rejoin()
