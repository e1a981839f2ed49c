"""Every call of the library in one world of SIZE ranks; prints one JSON line per call."""

import argparse
import json
import os
import time

import torch

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--size", type=int, required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--gate", help="leave the world only once this file exists")
args = parser.parse_args()
r, n = args.rank, args.size

job = mwrun.init(worlds={"w": mwrun.WorldSpec(rank=r, size=n, port=args.port, timeout=20)})
w = job.world("w")
results = {}


def report(call, value, expected):
    results[call] = value == expected
    print(json.dumps({"call": call, "value": value, "expected": expected}), flush=True)


# send/recv around a ring, with isend so no one waits for itself
out = torch.tensor([float(r)])
got = torch.zeros(1)
sending = w.isend(out, (r + 1) % n)
w.recv(got, (r - 1) % n)
sending.wait()
report("send_recv", got.item(), float((r - 1) % n))

received = torch.zeros(1)
pending = w.irecv(received, (r - 1) % n)
w.send(torch.tensor([r * 2.0]), (r + 1) % n)
pending.wait()
report("isend_irecv", received.item(), float(((r - 1) % n) * 2))

t = torch.tensor([float(r)]) if r == n - 1 else torch.zeros(1)
t = torch.full((3,), 10.0 * (n - 1)) if r == n - 1 else torch.zeros(3)
w.broadcast(t, n - 1)
report("broadcast", t.tolist(), [10.0 * (n - 1)] * 3)

t = torch.tensor([r + 1.0, 1.0])
w.all_reduce(t)
report("all_reduce_sum", t.tolist(), [n * (n + 1) / 2, float(n)])

t = torch.tensor([r + 1.0])
w.all_reduce(t, op=mwrun.ReduceOp.MAX)
report("all_reduce_max", t.item(), float(n))

t = torch.tensor([r + 1.0])
w.reduce(t, 0)
if r == 0:
    report("reduce", t.item(), n * (n + 1) / 2)

outs = [torch.zeros(2) for _ in range(n)]
w.all_gather(outs, torch.tensor([float(r), -float(r)]))
report("all_gather", [o.tolist() for o in outs], [[float(i), -float(i)] for i in range(n)])

dst = n - 1
gathered = [torch.zeros(1) for _ in range(n)] if r == dst else None
w.gather(torch.tensor([r * 3.0]), gathered, dst=dst)
if r == dst:
    report("gather", [g.item() for g in gathered], [i * 3.0 for i in range(n)])

piece = torch.zeros(1)
w.scatter(piece, [torch.tensor([i * 100.0]) for i in range(n)] if r == 0 else None, src=0)
report("scatter", piece.item(), r * 100.0)

w.barrier()
report("barrier", True, True)

t = torch.tensor([1.0])
work = w.all_reduce(t, async_op=True)
work.wait()
report("async_all_reduce", [t.item(), work.is_completed()], [float(n), True])

# A member done with its calls may be ahead of a peer still finishing the last one:
# leaving now (the store's host, rank 0, above all) would break the peer's world.
while args.gate and not os.path.exists(args.gate):
    time.sleep(0.05)  # the test opens the gate once every rank has reported
job.close()
raise SystemExit(0 if all(results.values()) else 1)
