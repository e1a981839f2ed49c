"""mwrun side by side with torchrun, on the same job, on this machine.

    python bench/compare_torchrun.py                 # N = 2, 4, 8; 3 runs each (~10 min)
    python bench/compare_torchrun.py --ranks 2 --runs 1

The job (bench/bin/ring.py): N ranks all_reduce a 1 KiB gloo tensor in a loop on
127.0.0.1, under ``torchrun`` (plain torch.distributed, from the installed torch) and
under ``mwrun launch`` (the same loop on an mwrun world). Both may restart a failed
rank (torchrun --max-restarts 3; mwrun restart: on-failure), at once; mwrun's ranks
start warm (``preload: [torch]``). Each run:

1. launch: from starting the launcher to every rank's first completed all_reduce;
2. SIGKILL one rank; count the processes started afresh, the time until every rank
   has completed an all_reduce again, and the collectives the other ranks complete
   in the 5 s after the kill (beside their pace before it);
3. Ctrl-C to the launcher: time until it has exited, and processes left behind.

Then what torchrun cannot do: a leader receiving from N workers, each in a world of
its own; one worker is killed; the leader's throughput on the other worlds during the
next 5 s, as a fraction of before. Medians over the runs; ratios are mwrun/torchrun.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil

if __package__:  # bench.compare_torchrun, the checkout's root on the path (the tests)
    from bench.common import NotStarted, ended, exited
else:  # a script, or ``compare_torchrun`` with its folder on the path
    from common import NotStarted, ended, exited

HERE = Path(__file__).resolve().parent
PY = sys.executable
RECOVERY_WAIT = 30.0  # seconds after the kill before "did not recover" is said
WINDOW = 5.0  # seconds after the kill in which the others' collectives are counted


class Job:
    """A launcher and its ranks' JSON lines (with or without a name prefix)."""

    def __init__(self, argv: list[str], env: dict):
        self.tag = uuid.uuid4().hex
        self.started = time.monotonic()
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env={**os.environ, **env,
                                                      "BENCH_TAG": self.tag, "NO_COLOR": "1"},
                                      start_new_session=True)
        self.name = Path(argv[0]).name if argv[1:3] != ["-m", "mwrun"] else \
            f"mwrun {argv[3]}"
        self.events: list[dict] = []
        self.lines: list[str] = []
        self.ended: float | None = None  # when the launcher's output ended (it exited)
        self.arrived = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        decoder = json.JSONDecoder()
        for line in self.popen.stdout:
            self.lines.append(line.rstrip())
            text, at = line.split(" | ", 1)[-1].strip(), 0
            while at < len(text):  # a line may hold several objects (shared pipes)
                try:
                    value, at = decoder.raw_decode(text, at)
                except ValueError:
                    break
                if isinstance(value, dict):
                    self.events.append(value)
                    self.arrived.put(value)
        self.popen.stdout.close()  # only this thread reads it
        self.ended = time.monotonic()
        self.arrived.put({})

    def wait_until(self, condition, timeout: float) -> bool:
        """Whether ``condition`` held within ``timeout``: asked again at each line, and
        answered at once when the launcher's output ended (it exited: no more lines)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.ended is not None:
                return condition()
            try:
                self.arrived.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return condition()
        return True

    def require(self, condition, timeout: float, what: str) -> None:
        """``condition`` within ``timeout``, or the bench ends saying why not: the
        launcher's own words where it exited first."""
        if self.wait_until(condition, timeout):
            return
        if self.ended is not None:
            self.popen.wait(timeout=60)  # its output ended: it is exiting
        raise NotStarted(f"{what}: never, " + (exited(self.popen, self.lines, self.name)
                                               or f"not within {timeout:g} s"))

    def firsts(self, after: float = 0.0) -> dict[int, dict]:
        """rank -> the earliest first/resumed event after ``after``."""
        found: dict[int, dict] = {}
        for ev in self.events:
            if ev.get("e") in ("first", "resumed") and ev["t"] > after:
                found.setdefault(ev["rank"], ev)
        return found

    def leftovers(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.environ().get("BENCH_TAG") == self.tag:
                    found.append(proc)
        return found

    def stop(self) -> tuple[float | None, int]:
        """Ctrl-C: (seconds until the launcher exited, or None if it had exited by
        itself before; processes left behind)."""
        start = time.monotonic()
        if self.popen.poll() is not None:
            return None, len(self.leftovers())
        self.popen.send_signal(signal.SIGINT)
        ended(self.popen, 60)
        took = time.monotonic() - start
        time.sleep(0.5)  # what is still there half a second later is left behind
        left = self.leftovers()
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        return took, len(left)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def progress(events: list[dict], skip_rank: int, start: float, end: float) -> int:
    """All-reduces completed in [start, end] by every rank but skip_rank (any pid)."""
    series: dict[int, list[tuple[float, int]]] = {}
    for ev in events:
        if ev.get("e") == "tick" and ev["rank"] != skip_rank:
            series.setdefault(ev["pid"], []).append((ev["t"], ev["n"]))

    def count_at(points, when):
        return max((n for t, n in points if t <= when), default=0)

    return sum(count_at(p, end) - count_at(p, start) for p in series.values())


def ring_run(launcher: str, n: int, work: Path) -> dict:
    if launcher == "torchrun":
        argv = [str(Path(PY).with_name("torchrun")), "--nproc-per-node", str(n),
                "--max-restarts", "3", "--master-port", str(free_port()),
                str(HERE / "bin" / "ring.py"), "--api", "torch"]
    else:
        topology = work / f"ring{n}.yaml"
        topology.write_text(f"""\
version: 1
name: ring
preload: [torch]
processes:
  rank:
    replicas: {n}
    cmd: [{PY}, {HERE / 'bin' / 'ring.py'}, --api, mwrun]
    restart: on-failure
    max_restarts: 3
    restart_backoff: 0
worlds:
  ring: {{members: [rank]}}
""")
        argv = [PY, "-m", "mwrun", "launch", str(topology)]
    job = Job(argv, {"MWRUN_HOME": str(work / "home")})
    result: dict = {}
    try:
        job.require(lambda: len(job.firsts()) == n, 120, f"{launcher} N={n}: every rank started")
        firsts = job.firsts()
        result["launch"] = max(ev["t"] for ev in firsts.values()) - job.started
        time.sleep(2.5)
        victim = n - 1
        killed = time.monotonic()
        os.kill(firsts[victim]["pid"], signal.SIGKILL)
        recovered = job.wait_until(lambda: len(job.firsts(after=killed)) == n
                                   or job.popen.poll() is not None, RECOVERY_WAIT)
        recovered = len(job.firsts(after=killed)) == n
        again = job.firsts(after=killed)
        result["recovery"] = (max(ev["t"] for ev in again.values()) - killed) if recovered \
            else None
        job.wait_until(lambda: time.monotonic() >= killed + WINDOW, WINDOW + 1)
        time.sleep(max(killed + WINDOW + 0.3 - time.monotonic(), 0))
        result["restarted"] = sum(1 for ev in job.events
                                  if ev.get("e") == "start" and ev["t"] > killed)
        result["gave_up"] = (job.ended - killed) if job.ended is not None else None
        result["during"] = progress(job.events, victim, killed, killed + WINDOW)
        result["before"] = progress(job.events, victim, killed - 2.0, killed) * WINDOW / 2.0
    finally:
        result["shutdown"], result["leftover"] = job.stop()
    return result


def star_run(n: int, work: Path, backoff: float) -> float:
    """The leader's throughput on the untouched worlds during a fault, / before.

    With backoff 0 the killed worker's replacement starts inside the window, and on a
    machine with few cores its start-up (importing torch) competes with the survivors
    for CPU; with a backoff longer than the window the fault alone is measured.
    """
    lines = ["version: 1", "name: star", "preload: [torch]", "processes:",
             f"  leader: {{cmd: [{PY}, {HERE / 'bin' / 'star_leader.py'}]}}",
             "  worker:", f"    replicas: {n}",
             f"    cmd: [{PY}, {HERE / 'bin' / 'star_worker.py'}]", "    restart: on-failure",
             f"    restart_backoff: {backoff}", "worlds:"]
    lines += [f"  w{i}: {{members: [leader, worker-{i}]}}" for i in range(n)]
    topology = work / f"star{n}.yaml"
    topology.write_text("\n".join(lines) + "\n")
    job = Job([PY, "-m", "mwrun", "launch", str(topology)], {"MWRUN_HOME": str(work / "home")})
    try:
        def flowing():
            ticks = [e for e in job.events if e.get("e") == "tick"]
            return ticks and all(v > 0 for v in ticks[-1]["counts"].values())

        job.require(flowing, 120, f"star N={n}: the worlds flowing")
        time.sleep(3.0)
        victim = next(p for p in psutil.process_iter(["environ"])
                      if (p.info["environ"] or {}).get("MWRUN_PROCESS") == "worker-0"
                      and (p.info["environ"] or {}).get("BENCH_TAG") == job.tag)
        killed = time.monotonic()
        victim.kill()
        time.sleep(WINDOW + 0.5)

        def others_at(when):
            tick = max((e for e in job.events if e.get("e") == "tick" and e["t"] <= when),
                       key=lambda e: e["t"])
            return sum(c for w, c in tick["counts"].items() if w != "w0"), tick["t"]

        before0, t0 = others_at(killed - 3.0)
        before1, t1 = others_at(killed)
        during1, t2 = others_at(killed + WINDOW)
        return ((during1 - before1) / (t2 - t1)) / ((before1 - before0) / (t1 - t0))
    finally:
        job.stop()


def med(values):
    """The median, where None ("never", "no") counts as larger than any number."""
    ranked = sorted(values, key=lambda v: (v is None, v or 0))
    middle = ranked[(len(ranked) - 1) // 2: len(ranked) // 2 + 1]
    if any(v is None for v in middle):
        return None
    return statistics.mean(middle)


def fmt(value, unit="", none="never") -> str:
    if value is None:
        return none
    return f"{value:.2f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import torch

    table = {}
    with tempfile.TemporaryDirectory(prefix="mwrun-compare-") as tmp:
        work = Path(tmp)
        for n in args.ranks:
            for launcher in ("torchrun", "mwrun"):
                runs = [ring_run(launcher, n, work) for _ in range(args.runs)]
                table[(launcher, n)] = {k: med([r[k] for r in runs]) for k in runs[0]}
                table[(launcher, n)]["recovered"] = sum(r["recovery"] is not None
                                                        for r in runs)
                print(f"  {launcher} N={n}: {table[(launcher, n)]}", file=sys.stderr,
                      flush=True)
            table[("star", n)] = med([star_run(n, work, 0) for _ in range(args.runs)])
            table[("star-late", n)] = med([star_run(n, work, WINDOW + 2)
                                           for _ in range(args.runs)])
    print(f"mwrun vs torchrun (torch {torch.__version__}), gloo on 127.0.0.1,"
          f" {os.cpu_count()} cores; median of {args.runs} runs; ratio = mwrun/torchrun")
    rows = [("launch to first all_reduce, s", "launch"),
            ("processes restarted after 1 kill", "restarted"),
            ("kill to all ranks communicating, s", "recovery"),
            (f"others' all_reduces in {WINDOW:g} s after", "during"),
            (f"  (their pace before, per {WINDOW:g} s)", "before"),
            ("launcher quit by itself after the kill", "gave_up"),
            ("Ctrl-C to launcher exit, s", "shutdown"),
            ("processes left behind", "leftover")]
    head = "".join(f"{'N=' + str(n):>30}" for n in args.ranks)
    print(f"{'':38}{head}")
    print(f"{'':38}" + "".join(f"{'torchrun':>10}{'mwrun':>10}{'ratio':>10}"
                                for _ in args.ranks))
    for label, key in rows:
        cells = ""
        for n in args.ranks:
            a, b = table[("torchrun", n)][key], table[("mwrun", n)][key]
            ratio = f"{b / a:.2f}" if a and b is not None else "-"
            none = {"gave_up": "no", "shutdown": "(quit)"}.get(key, "never")
            cells += f"{fmt(a, none=none):>10}{fmt(b, none=none):>10}{ratio:>10}"
        print(f"{label:38}{cells}")
    print("runs in which every rank communicated again after the kill: " + ", ".join(
        f"N={n}: torchrun {table[('torchrun', n)]['recovered']}/{args.runs},"
        f" mwrun {table[('mwrun', n)]['recovered']}/{args.runs}" for n in args.ranks))
    print("multi-world (mwrun only): a leader and N workers, each pair a world; one worker"
          " killed. The leader's throughput on the untouched worlds in the 5 s after the"
          " kill, as a fraction of before:")
    print("  replacement started at once:           "
          + ", ".join(f"N={n}: {table[('star', n)]:.2f}" for n in args.ranks))
    print("  replacement started after the window:  "
          + ", ".join(f"N={n}: {table[('star-late', n)]:.2f}" for n in args.ranks))


if __name__ == "__main__":
    main()
