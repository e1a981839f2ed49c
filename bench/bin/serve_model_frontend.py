"""bench/compare_serve.py's mwrun client: requests arrive open-loop at ``--rate`` per
second (request i is due at start + i / rate, whether or not earlier ones were
answered) and go to the model's replicas round-robin, one world per replica
(``pair-I``), as examples/serving/frontend.py does; each request's outcome is one JSON
line in ``--out``: ``{"i", "t" (when it was due, wall clock), "lat" (due -> answered,
s), "ok", "pid" (the replica that answered), "err"}``, as bench/bin/ray_serve_app.py
writes Ray Serve's.

A request is tried once: a failure is recorded, never sent again (Ray Serve's handle
does not resend either), so both sides' failed-request counts mean the same. A world
that broke (its replica killed) is rejoined in the background and gets requests again
once re-formed; one being retired (``draining``) gets no new request and is let go at
once (nothing of ours is in flight between rounds), so a scale-down fails nothing.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
import time
from pathlib import Path

import torch

import mwrun

# The replicas' worlds, round-robin, as the job's events change them: the serving
# example's own (it says each change on stdout, which goes to the run's log).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "serving"))
from frontend import Workers as Replicas

WIDTH = 256


def serve(args) -> None:
    job = mwrun.init()
    replicas = Replicas(job)
    torch.manual_seed(1)
    request = torch.randn(1, WIDTH)  # the same input every time, as the Ray client's
    backlog: collections.deque[tuple[int, float, float]] = collections.deque()
    # Due times on the monotonic clock (the waits), said in wall-clock time (the bench
    # reads them beside the times of its own commands).
    start, wall = time.monotonic(), time.time()
    made = 0
    with open(args.out, "a", buffering=1) as out:
        while True:
            now = time.monotonic()
            while start + made / args.rate <= now:
                due = start + made / args.rate
                backlog.append((made, due, wall + (due - start)))
                made += 1
            replicas.follow()
            if not replicas.ready or not backlog:
                wait = start + made / args.rate - time.monotonic()
                replicas.follow(timeout=min(max(wait, 0.0005), 0.05))
                continue
            one_round(job, replicas, backlog, request, out)


def one_round(job, replicas: Replicas, backlog: collections.deque, request, out) -> None:
    """One request to each ready replica, all in flight at once."""
    sent = []
    for name in replicas.next_round(len(backlog)):
        number, due, at = backlog.popleft()
        answer = torch.zeros(1, WIDTH + 1)
        try:
            world = job.world(name)
            sent.append((name, number, due, at, answer, world.isend(request, 1),
                         world.irecv(answer, 1)))
        except mwrun.MwrunError as exc:
            _failed(replicas, name, number, due, at, exc, out)
    for name, number, due, at, answer, send, receive in sent:
        try:
            send.wait()
            receive.wait()
        except mwrun.MwrunError as exc:
            _failed(replicas, name, number, due, at, exc, out)
            continue
        out.write(json.dumps({"i": number, "t": at, "lat": time.monotonic() - due, "ok": True,
                              "pid": int(answer[0, WIDTH].item()), "err": None}) + "\n")


def _failed(replicas: Replicas, name: str, number: int, due: float, at: float, exc: Exception,
            out) -> None:
    out.write(json.dumps({"i": number, "t": at, "lat": time.monotonic() - due, "ok": False,
                          "pid": None, "err": f"{type(exc).__name__}: {exc}"[:200]}) + "\n")
    if isinstance(exc, mwrun.BrokenWorldError):
        replicas.rejoin(name)
    else:
        replicas.drop(name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--out", required=True, help="the JSON lines file to append to")
    with contextlib.suppress(KeyboardInterrupt):  # stopped (mwrun stop): a clean end
        serve(parser.parse_args())
