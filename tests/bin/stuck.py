"""A member of world1 in an all_reduce loop that misbehaves on cue: when the file
named by its argument appears, it reads what to do from it and removes it (so its
restart behaves): ``sleep`` (in Python, forever: its library still beats, its peers'
call times out) or ``gil`` (a C call that holds the GIL: its library's own thread
cannot run either, so it is declared hung). The post-mortem tests' member."""

import ctypes
import os
import sys
import time

import torch

import mwrun

cue = sys.argv[1] if len(sys.argv) > 1 else None
job = mwrun.init()
world = job.world("world1")
t = torch.ones(4)
while True:
    what = ""
    if cue is not None and os.path.exists(cue):
        with open(cue) as f:
            what = f.read().strip()
    if what:  # empty: read between its writer's create and write; read again next time
        os.unlink(cue)
        print(f"on cue: {what}", flush=True)
        if what == "sleep":
            time.sleep(3600)
        elif what == "gil":
            ctypes.PyDLL(None).sleep(3600)  # libc's sleep, called with the GIL held
    try:
        world.all_reduce(t)
    except mwrun.BrokenWorldError:
        world.rejoin()
    time.sleep(0.02)
