"""One process in a one-rank nccl world ``solo`` and a two-rank gloo world ``pair``.

Role ``gpu``: keeps calling all_reduce in ``pair`` from a thread; then queues an nccl
all_gather in ``solo`` behind a long kernel (``torch.cuda._sleep``) that outlasts the
world's timeout, and reports when ``solo`` broke and how fast ``pair`` went before and
after. ``--hang-abort``: the first incarnation's abort of ``solo`` is replaced by one
that never returns (a stand-in for a hung ncclCommAbort). Role ``cpu``: the other
member of ``pair``, calling until the world ends.
"""

import argparse
import json
import os
import threading
import time

import torch

import mwrun
from mwrun.worlds import nccl

parser = argparse.ArgumentParser()
parser.add_argument("role", choices=["gpu", "cpu"])
parser.add_argument("--kernel", type=float, default=20.0, help="seconds of GPU sleep")
parser.add_argument("--hang-abort", action="store_true")
args = parser.parse_args()


def say(**fields):
    print(json.dumps(fields), flush=True)


job = mwrun.init()
restart = int(os.environ.get("MWRUN_RESTART_COUNT", "0"))
say(event="formed", restart=restart, worlds=sorted(job.worlds))
pair = job.worlds.get("pair")
if args.role == "cpu":
    try:
        while True:
            pair.all_reduce(torch.ones(1))
    except mwrun.BrokenWorldError as error:
        say(event="pair_ended", reason=error.reason)
    job.close()
    raise SystemExit(0)

solo = job.world("solo")
if args.hang_abort and restart > 0:  # the restarted member: healthy, done
    say(event="restarted", restart=restart)
    job.close()
    raise SystemExit(0)
if args.hang_abort:
    nccl.ABORT_DEADLINE = 2.0
    solo.membership.state.group._abort = threading.Event().wait  # never returns

calls, stop = [0], threading.Event()


def cycles_per_second() -> float:
    """The GPU's clock as ``torch.cuda._sleep`` counts it, timed here: the device's
    ``clock_rate`` is 0 under CUDA 13, which dropped ``cudaDeviceProp.clockRate`` (the
    suite's first run on an H100 slept no time at all, and nothing broke)."""
    cycles = 50_000_000
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (begin.elapsed_time(end) / 1000.0)



def gloo_loop():
    while not stop.is_set():
        try:
            pair.all_reduce(torch.ones(1))
        except mwrun.BrokenWorldError:
            return
        calls[0] += 1
        time.sleep(0.01)


if pair is not None:
    threading.Thread(target=gloo_loop, daemon=True).start()
time.sleep(2.0)
before = calls[0] / 2.0
cycles = int(cycles_per_second() * args.kernel)
torch.cuda._sleep(cycles)  # the current stream is busy for args.kernel seconds
t = torch.ones(1, device=solo.device)
out = [torch.zeros(1, device=solo.device)]
began = time.monotonic()
# Queued behind the kernel, it outlives the world's timeout. An all_gather into another
# tensor, not an in-place all_reduce: on torch 2.11+cu130 with NCCL 2.28.9 (an H200, raw
# torch, no mwrun) a one-rank all_reduce queued behind a 12 s kernel was done in 0.07 s,
# so no call waited and nothing could break. Whether this one waits is reported
# (``waited``): the tests name a premise that fails, never blame mwrun for it.
work = solo.all_gather(out, t, async_op=True)
time.sleep(1.0)
waited = not work.is_completed()
while not solo.broken and time.monotonic() - began < 60:  # the world's timeout is 3 s
    time.sleep(0.05)
say(event="solo_broken" if solo.broken else "solo_not_broken",
    after=round(time.monotonic() - began, 2), reason=solo.reason, cycles=cycles,
    waited=waited, call="all_gather")
start = calls[0]
time.sleep(3.0)
say(event="pair_pace", before=before, after=(calls[0] - start) / 3.0, alive=True)
stop.set()
job.close()
say(event="done")
