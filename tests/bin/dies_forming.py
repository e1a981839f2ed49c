"""Rank 1 of a two-member world. Its first start dies after it arrived in the world's
generation but before it built its group (the window a fault hits when it lands in
the tens of milliseconds of a warm restart): it waits until rank 0 is surely inside
its own build, waiting for rank 1's address, then exits 3. A later start sends one
number to rank 0 and ends."""

import os
import time

import torch

import mwrun
from mwrun.worlds import backends

build = backends.create


def dies_first(*args, **kwargs):
    if os.environ["MWRUN_RESTART_COUNT"] == "0":
        time.sleep(0.5)  # rank 0 waits for our address in its rendezvous by now
        os._exit(3)
    return build(*args, **kwargs)


backends.create = dies_first
job = mwrun.init()
[world] = job.worlds.values()
world.send(torch.ones(1), 0)
job.close()
