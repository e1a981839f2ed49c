"""Rank 0 of every world it is in: receives from rank 1 of each, one thread per world,
rejoins broken worlds, and reports as JSON lines. Ends when all its worlds are over."""

import json
import sys
import threading
import time

import torch

import mwrun

NUMEL = int(sys.argv[1]) if len(sys.argv) > 1 else 1  # float32 elements per message


def say(**fields):
    # One write per line: the world threads print at the same time.
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def serve(world):
    t = torch.zeros(NUMEL)
    while True:
        try:
            world.recv(t, 1)
            say(event="recv", world=world.name, value=t[0].item(), generation=world.generation)
        except mwrun.BrokenWorldError as exc:
            say(event="broken", world=world.name, reason=exc.reason, t=time.monotonic())
            try:
                world.rejoin()
            except mwrun.BrokenWorldError as final:
                say(event="over", world=world.name, reason=final.reason)
                return
            say(event="rejoined", world=world.name, generation=world.generation)


say(event="init", t=time.time())
job = mwrun.init()
threads = [threading.Thread(target=serve, args=(w,)) for w in job.worlds.values()]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
job.close()
say(event="done")
