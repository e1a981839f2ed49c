"""A member of one world that lists a scaled process bare (elastic training): all_reduce
in a loop; a resize is one BrokenWorldError, then rejoin() at the new size and rank;
removed from the world (drained), it ends. Says each step of that as a JSON line."""

import json
import time

import torch

import mwrun


def say(**fields) -> None:
    print(json.dumps({**fields, "t": time.time()}), flush=True)


job = mwrun.init()
[world] = job.worlds.values()
say(event="joined", size=world.size, rank=world.rank, generation=world.generation)
sums = None
while True:
    try:
        t = torch.ones(1)
        world.all_reduce(t)
        if t.item() != sums:  # the first call at a new size: every member counted
            sums = t.item()
            say(event="sum", value=sums, size=world.size, rank=world.rank,
                generation=world.generation)
        time.sleep(0.05)
    except mwrun.WorldClosedError as exc:
        say(event="closed", reason=exc.reason)
        break
    except mwrun.BrokenWorldError as exc:
        say(event="broken", reason=exc.reason, resized=exc.reason.startswith("resized"))
        try:
            world.rejoin()
        except mwrun.WorldClosedError as gone:
            say(event="closed", reason=gone.reason)
            break
        say(event="joined", size=world.size, rank=world.rank, generation=world.generation)
job.close()
