"""By hand: a thread blocks in a recv on world A (its peer never sends) while the main
thread removes A (--remover) or waits for its peer to; prints what the blocked call and
a rejoin() after it raised, and what a later call raises."""

import argparse
import json
import threading
import time

import torch

import mwrun
from mwrun.worlds import inflight

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--remover", action="store_true")
args = parser.parse_args()

job = mwrun.init(worlds={"A": mwrun.WorldSpec(rank=args.rank, size=2, port=args.port,
                                              timeout=60)})
a = job.world("A")
# Both members have formed before either goes on: init returns in one member as soon as
# its own group is built, and a remover that removed the world then could end its
# peer's init still in the group's rendezvous (by hand, rank 0 hosts the store).
a.barrier()
seen: dict = {}


def caught(name: str, call) -> None:
    try:
        call()
        seen[name] = ["returned"]
    except Exception as exc:
        seen[name] = [type(exc).__name__, getattr(exc, "reason", str(exc))]


def blocked() -> None:
    caught("blocked", lambda: a.recv(torch.zeros(1), 1 - args.rank))
    caught("rejoin", lambda: a.rejoin(timeout=60))


thread = threading.Thread(target=blocked)
thread.start()
if args.remover:
    while not inflight.busy("A"):  # until the other thread is in its recv
        time.sleep(0.01)
    job.remove_world("A")
thread.join()
caught("after", lambda: a.send(torch.zeros(1), 1 - args.rank))
print(json.dumps({**seen, "worlds": sorted(job.worlds)}), flush=True)
job.close()
