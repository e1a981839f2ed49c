"""A member with many threads whose names are long (a pool named after its tasks): its
stacks, as they are, do not fit one line to the head. All-reduces in its world until
it is stopped."""

import threading
import time

import torch

import mwrun

job = mwrun.init()
[world] = job.worlds.values()
release = threading.Event()
for i in range(300):
    threading.Thread(target=release.wait, name=f"task-{i}-" + "n" * 5000, daemon=True).start()
print("crowded", flush=True)
while True:
    world.all_reduce(torch.ones(1))
    time.sleep(0.05)
