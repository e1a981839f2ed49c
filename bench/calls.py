"""Per-call cost of mwrun against the raw torch process group, in the same run.

Every rank process holds two raw ``ProcessGroupGloo`` (each on its own device, like
mwrun's) and an mwrun world over the same ranks, and times them in rotating blocks,
so machine noise hits all alike. The second raw group gives the noise floor: raw2/raw
("A/A") differs from 1 only by noise, so an mwrun/raw ratio inside it is no cost at
all. A last table times mwrun's own Python per call against a stand-in group that
does nothing, which is free of network noise. Prints median microseconds per call and
the mwrun/raw ratio for all_reduce and send/recv (a round trip between rank pairs) at
1 KiB and 16 MiB, with 2 and 4 ranks.

    python bench/calls.py            # the whole table (a few minutes here)
    python bench/calls.py --quick    # fewer blocks
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time

SIZES = {"1 KiB": 256, "16 MiB": 4 * 2**20}  # float32 elements
GOALS = {"1 KiB": 1.10, "16 MiB": 1.02}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_cases(raw, raw2, world, t, first: bool, peer: int):
    """The timed calls: all_reduce, and a send/recv round trip between pairs 0-1, 2-3."""

    def raw_round_trip(group):
        def call():
            if first:
                group.send([t], peer, 0).wait()
                group.recv([t], peer, 0).wait()
            else:
                group.recv([t], peer, 0).wait()
                group.send([t], peer, 0).wait()
        return call

    def mw_round_trip():
        if first:
            world.send(t, peer)
            world.recv(t, peer)
        else:
            world.recv(t, peer)
            world.send(t, peer)

    return (("all_reduce", {"raw": lambda: raw.allreduce([t]).wait(),
                            "raw2": lambda: raw2.allreduce([t]).wait(),
                            "mwrun": lambda: world.all_reduce(t)}),
            ("send/recv", {"raw": raw_round_trip(raw), "raw2": raw_round_trip(raw2),
                           "mwrun": mw_round_trip}))


def rank_main(rank: int, size: int, port: int, reps: int) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import mwrun

    store = dist.TCPStore("127.0.0.1", port, size, rank == 0, timeout=timedelta(seconds=60))
    cls = dist.ProcessGroupGloo
    options = cls._Options()
    options._devices = [cls.create_device(hostname="127.0.0.1")]
    options._timeout = timedelta(seconds=60)
    raw = cls(dist.PrefixStore("raw/", store), rank, size, options)
    options2 = cls._Options()
    options2._devices = [cls.create_device(hostname="127.0.0.1")]
    options2._timeout = timedelta(seconds=60)
    raw2 = cls(dist.PrefixStore("raw2/", store), rank, size, options2)
    job = mwrun.init(worlds={"w": mwrun.WorldSpec(rank=rank, size=size, port=port + 1,
                                                  timeout=60)})
    world = job.world("w")

    results = []
    for label, numel in SIZES.items():
        t = torch.ones(numel)
        iters = 20 if numel < 10_000 else 1

        cases = make_cases(raw, raw2, world, t, rank % 2 == 0, rank ^ 1)
        for op, fns in cases:
            times = {name: [] for name in fns}
            for fn in fns.values():  # warm every path
                fn()
            raw.barrier().wait()
            for rep in range(reps):
                order = list(fns) if rep % 2 == 0 else list(reversed(fns))
                for name in order:
                    start = time.perf_counter()
                    for _ in range(iters):
                        fns[name]()
                    times[name].append((time.perf_counter() - start) / iters * 1e6)
            results.append({"op": op, "size": label, "ranks": size,
                            **{name: statistics.median(v) for name, v in times.items()}})
    if rank == 0:
        print(json.dumps(results), flush=True)
    raw.barrier().wait()  # rank 0 hosts the world's store: it leaves last
    job.close()


def python_cost() -> dict[str, float]:
    """mwrun's own microseconds per call, against a group whose calls do nothing."""
    import timeit

    import torch

    from mwrun.worlds import backends
    from mwrun.worlds.world import World
    from mwrun.worlds.worldspec import WorldSpec

    class Done:
        def wait(self, *args):
            return True

        def is_completed(self):
            return True

    class Idle:
        def send(self, *args):
            return Done()

        recv = allreduce = send

    world = World("w", WorldSpec(rank=0, size=2))
    world.membership.state.formed(0, 0, 2, backends.Backend("gloo", Idle(), torch.device("cpu")),
                                  ended=lambda: False)
    t = torch.ones(256)
    idle = Idle()
    calls = {"all_reduce": (lambda: world.all_reduce(t), lambda: idle.allreduce([t]).wait()),
             "send": (lambda: world.send(t, 1), lambda: idle.send([t], 1, 0).wait()),
             "recv": (lambda: world.recv(t, 1), lambda: idle.recv([t], 1, 0).wait())}
    cost = {}
    for name, (ours, bare) in calls.items():
        ours_s = min(timeit.repeat(ours, number=20000, repeat=5)) / 20000
        bare_s = min(timeit.repeat(bare, number=20000, repeat=5)) / 20000
        cost[name] = (ours_s - bare_s) * 1e6
    return cost


def run(size: int, reps: int) -> list[dict]:
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--size", str(size),
                               "--port", str(port), "--reps", str(reps)],
                              stdout=subprocess.PIPE, text=True) for r in range(size)]
    try:
        out, _ = procs[0].communicate(timeout=900)
        for proc in procs[1:]:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rank", type=int)
    parser.add_argument("--size", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--reps", type=int, default=100, help="blocks per case")
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.size, args.port, args.reps)
        return
    reps = 20 if args.quick else args.reps
    rows = []
    for size in (2, 4):
        rows += run(size, reps)
    print("mwrun per call vs raw ProcessGroupGloo, same processes, same run"
          f" (median of {reps} rotating blocks per case)")
    print(f"{'op':<11} {'size':<7} {'ranks':>5} {'raw us':>10} {'mwrun us':>10}"
          f" {'ratio':>6} {'A/A':>6} {'goal':>5}  verdict")
    for row in rows:
        ratio = row["mwrun"] / row["raw"]
        floor = row["raw2"] / row["raw"]
        goal = GOALS[row["size"]]
        verdict = ("ok" if ratio <= goal else
                   "within noise" if abs(ratio - 1) <= abs(floor - 1) else "over")
        print(f"{row['op']:<11} {row['size']:<7} {row['ranks']:>5} {row['raw']:>10.1f}"
              f" {row['mwrun']:>10.1f} {ratio:>6.3f} {floor:>6.3f} {goal:>5.2f}  {verdict}")
    print()
    print("mwrun's own Python per call (stand-in group, no network; min of 5 x 20000):")
    for name, cost in python_cost().items():
        print(f"  {name:<11} +{cost:.2f} us")
    print()


if __name__ == "__main__":
    main()
