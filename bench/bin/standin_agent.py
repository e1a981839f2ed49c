"""A stand-in for ``mwrun agent``, for bench/scale.py only (never a mode of mwrun):
it speaks the real frame protocol (mwrun/host/frames.py) to the head over stdin and
stdout, as an agent reached over ssh does, and pretends to run the processes the head
asks it to start: each says the library's hello and ready in its worlds, then beats
at the library's interval (sent together, at most one frame a second, each saying how
long an agent would hold it; a link beat after BEAT seconds without a frame, as an
agent does), is probed as sleeping, and exits at once when signalled to (the time of that
exit frame goes to $MWRUN_BENCH_EXITS, for the exit -> break figure)."""

import argparse
import itertools
import json
import os
import select
import signal
import sys
import time

from mwrun import __version__
from mwrun.host import frames
from mwrun.host.relay import hold_for

parser = argparse.ArgumentParser()
parser.add_argument("--host", required=True)
args = parser.parse_args()
out = os.dup(1)
os.dup2(2, 1)
pids = itertools.count(10_000_000 + 10_000 * (abs(hash(args.host)) % 1000))
procs: dict[str, dict] = {}  # name -> {pid, interval, due}
last_sent = 0.0


def send(kind: str, **fields) -> None:
    global last_sent
    data = frames.encode({"kind": kind, **fields})
    while data:
        data = data[os.write(out, data):]
    last_sent = time.monotonic()


def beat_after(now: float, every: float) -> float:
    """When the library beats next: it checks on the wall clock's whole seconds
    (supervisor_link.aligned) and beats once ``every`` has nearly passed."""
    return float(int(now + every - 0.5) + 1)


def interval(worlds: dict, env: dict) -> float:  # as the library's job.beat_interval
    hang = float(env.get("MWRUN_HANG_TIMEOUT") or "inf")
    return max(0.05, min(5.0, min(w["timeout"] for w in worlds.values()) / 5, hang / 5))


def spawn(msg: dict) -> None:
    env = msg["env"]
    worlds = json.loads(env["MWRUN_WORLDS"])
    name, pid, every = msg["name"], next(pids), interval(worlds, env)
    procs[name] = {"pid": pid, "interval": every, "due": beat_after(time.time(), every)}
    send("spawned", name=name, pid=pid, warm=True)
    ready = [{"verb": "world", "process": name, "pid": pid, "world": w, "event": "ready",
              "generation": spec["generation"], "reason": ""} for w, spec in worlds.items()]
    send("control", requests=[{"verb": "hello", "process": name, "pid": pid,
                               "interval": every}, *ready])


def handle(msg: dict) -> bool:
    kind = msg["kind"]
    if kind == "spawn":
        spawn(msg)
    elif kind == "probe":
        send("probed", name=msg["name"], status="sleeping", cpu=0.0, rss=0)
    elif kind == "signal" and msg["name"] in procs and msg["signal"] in (
            signal.SIGKILL, signal.SIGTERM):
        del procs[msg["name"]]
        at = time.time()  # the frame's time: taken before it goes, written after it went
        send("exited", name=msg["name"], code=-msg["signal"])
        with open(os.environ["MWRUN_BENCH_EXITS"], "a") as log:
            log.write(f"{msg['name']} {at}\n")
    return kind != "stop"


send("hello", protocol=frames.PROTOCOL, version=__version__, host=args.host, pid=os.getpid(),
     control="/nonexistent", inventory={"cpus": list(range(8)), "gpus": [],
                                        "addrs": ["127.0.0.1"], "hostname": args.host})
decoder = frames.Decoder()
running = True
while running:
    now = time.time()  # the beats' schedule is the wall clock's, as the library's
    beats = [p for p in procs.values() if p["due"] <= now]
    if beats:
        for p in beats:
            p["due"] = beat_after(now, p["interval"])
        # Each beat says when the next is due (``next``), as the library's does
        # (worlds/beats.py): the head looks at a silence only once that has passed.
        send("control", requests=[{"verb": "heartbeat", "process": n, "pid": p["pid"],
                                   "next": round(p["due"] - now, 3),
                                   "hold": round(hold_for(min(p["interval"],
                                                              p["due"] - now)), 3)}
                                  for n, p in procs.items() if p in beats])
    elif time.monotonic() - last_sent >= frames.BEAT:
        send("beat")
    due = min([p["due"] - now for p in procs.values()]
              + [last_sent + frames.BEAT - time.monotonic()])
    ready, _, _ = select.select([0], [], [], max(0.0, min(due, 1.0)))
    if ready:
        data = os.read(0, 1 << 20)
        if not data:
            break
        for message in decoder.feed(data):
            running = running and handle(message)
sys.exit(0)
