"""The serving frontend: requests arrive at a steady rate and are answered by its
workers, one world per worker (``pair-I``), each round giving every ready worker one
request; workers come and go while it serves.

It follows its job's events: a worker that joined (``added``) gets requests from the
next round on; one being retired (``draining``) gets no new request and is let go
(``world.release()``) once its answer is in, so no request is lost to a scale
operation; a world that broke (a worker killed) is rejoined in the background and its
request retried. Every few seconds it says what it served; every request that failed
is said with why. ``--autoscale MIN-MAX`` scales the workers from inside the job on the
backlog (``job.scale``): more when requests wait, fewer when workers idle.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import threading
import time

import torch

import mwrun

REPORT_EVERY = 5.0  # seconds between the lines that say what was served
SCALE_EVERY = 2.0  # seconds between the autoscaler's looks at the backlog


class Workers:
    """The worlds this frontend sends requests to, in round-robin order."""

    def __init__(self, job):
        self.job = job
        self.ready = sorted(n for n in job.worlds if n.startswith("pair-"))
        self.turn = 0  # where the next round starts: every worker gets its share

    def next_round(self, count: int) -> list[str]:
        """Up to ``count`` workers, round-robin."""
        ready = self.ready
        start, self.turn = self.turn % len(ready), self.turn + count
        return [ready[(start + i) % len(ready)] for i in range(min(count, len(ready)))]

    def follow(self, timeout: float = 0) -> None:
        for event in self.job.events(timeout=timeout):
            name = event.world
            if not name.startswith("pair-"):
                continue
            if event.kind in ("added", "reformed") and name not in self.ready:
                self.ready.append(name)
                print(f"{name} {event.kind}: {len(self.ready)} workers", flush=True)
            elif event.kind == "draining":
                self.drop(name)
                world = self.job.worlds.get(name)  # (the live set: it may have gone since)
                if world is not None and world.release():  # no request of ours is there
                    print(f"{name} draining: let go, {len(self.ready)} workers", flush=True)
            elif event.kind == "removed":
                self.drop(name)
            elif event.kind in ("broken", "resized"):
                self.rejoin(name)

    def drop(self, name: str) -> None:
        if name in self.ready:
            self.ready.remove(name)

    def rejoin(self, name: str) -> None:
        """A broken world re-forms in the background; ``reformed`` brings it back."""
        self.drop(name)
        world = self.job.worlds.get(name)
        if world is not None:
            threading.Thread(target=_rejoin, args=(world,), daemon=True).start()


def _rejoin(world) -> None:
    try:
        world.rejoin()
    except mwrun.MwrunError as exc:  # closed for good meanwhile: it is removed
        print(f"{world.name} not rejoined: {exc}", flush=True)


class Autoscaler:
    """More workers while requests wait, fewer while workers idle (job.scale)."""

    def __init__(self, job, low: int, high: int):
        self.job, self.low, self.high = job, low, high
        self.next, self.idle = time.monotonic() + SCALE_EVERY, 0

    def look(self, backlog: int, workers: int, asked: int) -> None:
        if time.monotonic() < self.next:
            return
        self.next = time.monotonic() + SCALE_EVERY
        self.idle = self.idle + 1 if backlog == 0 and asked < workers else 0
        step = "+1" if backlog > 2 * workers and workers < self.high else \
            "-1" if self.idle >= 3 and workers > self.low else None
        if step is not None:
            self.idle = 0
            try:
                answer = self.job.scale("worker", step)
                print(f"autoscale worker={step} ({backlog} waiting, {workers} workers):"
                      f" {answer.get('op')}", flush=True)
            except mwrun.MwrunError as exc:
                print(f"autoscale worker={step} refused: {exc}", flush=True)


def serve(args) -> None:
    job = mwrun.init()
    workers = Workers(job)
    scaler = Autoscaler(job, *args.autoscale) if args.autoscale else None
    backlog: collections.deque[int] = collections.deque()
    made = served = failed = 0
    start = arrival = report = time.monotonic()
    while True:
        now = time.monotonic()
        while arrival <= now:  # requests arrive at --rate per second
            backlog.append(made)
            made, arrival = made + 1, arrival + 1 / args.rate
        workers.follow()
        if scaler is not None:
            scaler.look(len(backlog), len(workers.ready), min(len(backlog), len(workers.ready)))
        if now >= report:
            report = now + REPORT_EVERY
            print(f"served {served} requests in {now - start:.0f}s, {failed} failed,"
                  f" {len(backlog)} waiting; workers: {', '.join(workers.ready) or 'none'}",
                  flush=True)
        if not workers.ready or not backlog:
            workers.follow(timeout=min(max(arrival - now, 0.001), 0.05))
            continue
        answered, lost = one_round(job, workers, backlog)
        served += answered
        failed += lost


def one_round(job, workers: Workers, backlog: collections.deque) -> tuple[int, int]:
    """One request to each ready worker, all in flight at once; (answered, failed). A
    failed request goes back to the front of the backlog."""
    sent, answered, lost = [], 0, 0
    for name in workers.next_round(len(backlog)):
        number = backlog.popleft()
        request, answer = torch.tensor([float(number)]), torch.zeros(1)
        try:
            world = job.world(name)
            sent.append((name, number, answer, world.isend(request, 1),
                         world.irecv(answer, 1)))
        except mwrun.MwrunError as exc:
            lost += _failed(workers, backlog, name, number, exc)
    for name, number, answer, send, receive in sent:
        try:
            send.wait()
            receive.wait()
            answered += 1
            assert answer.item() == 2 * number, (name, number, answer)
        except mwrun.MwrunError as exc:
            lost += _failed(workers, backlog, name, number, exc)
    return answered, lost


def _failed(workers: Workers, backlog, name: str, number: int, exc: Exception) -> int:
    """Say why, and send the request again later."""
    reason = getattr(exc, "reason", str(exc))
    print(f"request {number} to {name} failed ({type(exc).__name__}: {reason});"
          " it is sent again", flush=True)
    backlog.appendleft(number)
    if isinstance(exc, mwrun.BrokenWorldError):
        workers.rejoin(name)
    else:
        workers.drop(name)
    return 1


def _bounds(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--autoscale", type=_bounds, metavar="MIN-MAX",
                        help="scale the workers from here, on the backlog")
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C by hand: a clean end
        serve(parser.parse_args())
