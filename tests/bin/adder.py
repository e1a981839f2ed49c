"""By hand: two processes work in world A (a thread exchanging all the time) and add
world B beside it with job.add_world, exchange over B, then one of them (--remover)
removes B; the other sees B end and removes it too. A is untouched throughout.
Prints JSON lines: what each step saw, then every event of the job."""

import argparse
import json
import threading

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--port-a", type=int, required=True)
parser.add_argument("--port-b", type=int, required=True)
parser.add_argument("--remover", action="store_true")
args = parser.parse_args()


def say(**fields):
    print(json.dumps(fields), flush=True)


job = mwrun.init(worlds={"A": mwrun.WorldSpec(rank=args.rank, size=2, port=args.port_a,
                                              timeout=20)})
a = job.world("A")
stop, calls, errors = threading.Event(), [0], []


def work_in_a():
    """all_reduce in A until both ranks have asked to stop (they agree in the call)."""
    try:
        while True:
            t = torch.tensor([1.0, 1.0 if stop.is_set() else 0.0])
            a.all_reduce(t)
            assert t[0].item() == 2.0, t
            calls[0] += 1
            if t[1].item() > 0:
                return
    except Exception as exc:  # shown, and the test fails on it
        errors.append(repr(exc))


worker = threading.Thread(target=work_in_a)
worker.start()
b = job.add_world("B", mwrun.WorldSpec(rank=args.rank, size=2, port=args.port_b, timeout=20))
say(step="added", worlds=sorted(job.worlds), rank=b.rank, size=b.size)
t = torch.tensor([args.rank + 1.0])
b.all_reduce(t)
say(step="b_sum", value=t.item())
ack = torch.zeros(1)
if args.remover:
    b.recv(ack, 1 - args.rank)  # the other has its sum: B can go
    job.remove_world("B")
else:
    b.send(ack, 1 - args.rank)
    try:
        b.recv(ack, 1 - args.rank)  # never sent: the remover leaves instead
    except mwrun.BrokenWorldError as exc:
        say(step="b_ended", kind=type(exc).__name__, reason=exc.reason)
    job.remove_world("B")
say(step="removed", worlds=sorted(job.worlds))
# read before A's last call: the other may leave A right after it (A then ends here)
events = [[e.kind.value, e.world, e.generation] for e in job.events(timeout=0)]
stop.set()
worker.join()
t = torch.ones(1)
a.all_reduce(t)  # A works on after B's end
say(step="a_done", calls=calls[0], after=t.item(), errors=errors)
say(events=events)
job.close()
