"""A head SIGKILLed while its job works: with ``head_grace`` the job goes on, without
one (the baseline, today's default) it ends at once.

Each run launches a pair (tests/bin/pair.py: one member sends the other a count
every 10 ms over their world; the other writes the last count to a file), lets it
settle, SIGKILLs the head, and measures, interleaving grace and no grace:

* pace kept: counts in the ``--window`` seconds after the kill over the same window
  before it (1.0: nothing noticed the head's death; 0: the job ended);
* the same pids: every process of the job still running a window after the kill;
* the end: from the kill until nothing of the job is left, and by how much that
  outlasts the grace (issue 34: within the grace plus 2 s);
* what the head machine's agent costs while it keeps the job (CPU, over the window);
* a member SIGKILLed while the head is away: until a peer that only watches the world
  hears why (its agent's breaker; issue 34: within 50 ms).

    python bench/headless.py                 # ~2 min
    python bench/headless.py --runs 5 --grace 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PY, Launched, wait_for  # noqa: E402  (a bench's own folder first)


def leftovers(home: Path) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("MWRUN_HOME") == str(home) \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` so far (0 once it is gone)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def end(job: Launched, home: Path) -> None:
    """Nothing of a run left, whatever happened to it."""
    if job.popen.poll() is None:
        job.popen.kill()
    for pid in leftovers(home):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def count(out: Path) -> int:
    try:
        return int(out.read_text())
    except (OSError, ValueError):
        return 0


def one(folder: Path, grace: float, window: float) -> dict:
    home, out = folder / "home", folder / "count"
    cmd = f"{PY} {ROOT / 'tests' / 'bin' / 'pair.py'} --interval 0.01 --out {out}"
    topology = folder / "ticks.yaml"
    topology.write_text(f"version: 1\nname: ticks\nhead_grace: {grace:g}\n"
                        f"head_restart: false\nprocesses:\n"
                        f"  a: {{cmd: {cmd}}}\n  b: {{cmd: {cmd}}}\nworlds:\n"
                        f"  w: {{members: [a, b]}}\n")
    job = Launched(topology, home)
    try:
        job.healthy(120)
        wait_for(lambda: count(out) > 0, job.gone, 60, "the first count")
        time.sleep(1.0)  # settled: the pace measured is the job's steady one
        first = count(out)
        time.sleep(window)
        before = count(out) - first
        pids = [p for p in leftovers(home) if p != job.popen.pid]
        (agent,) = [h["agent_pid"] for h in (job.state() or {})["hosts"]]
        job.popen.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        job.popen.wait()
        first, spent = count(out), cpu(agent)
        after = same = None
        gone = None
        while gone is None or after is None:  # both looked at from the kill on
            now = time.monotonic() - killed
            if after is None and now >= window:
                after, spent = count(out) - first, cpu(agent) - spent
                same = all(psutil.pid_exists(pid) for pid in pids)
            if gone is None and (not leftovers(home) or now > grace + 60):
                gone = now
            time.sleep(0.02)
        return {"kept": after / before if before else 0.0, "same": same, "gone": gone,
                "agent_cpu": 100 * spent / window,
                "over": gone - grace, "left": leftovers(home)}
    finally:
        end(job, home)


def told_once(folder: Path, headless: bool) -> float:
    """Seconds from a member's SIGKILL until its peer, which only watches the world
    (tests/bin/watchful.py), hears why: with the head away, the agent's breaker; else
    (the baseline) the head's own break."""
    home = folder / "home"
    cmd = f"{PY} {ROOT / 'tests' / 'bin' / 'watchful.py'}"
    topology = folder / "watch.yaml"
    topology.write_text(f"version: 1\nname: watch\nhead_grace: 60\nhead_restart: false\n"
                        f"processes:\n"
                        f"  a: {{cmd: {cmd} --out {folder / 'a'}}}\n"
                        f"  b: {{cmd: {cmd} --out {folder / 'b'}}}\n"
                        f"worlds:\n  w: {{members: [a, b]}}\n")
    job = Launched(topology, home)
    try:
        job.healthy(120)
        victim: int = wait_for(lambda: next((p["pid"] for p in (job.state() or {})["processes"]
                                            if p["name"] == "b"), None), job.gone, 30, "b's pid")
        if headless:
            job.popen.send_signal(signal.SIGKILL)
            job.popen.wait()
        time.sleep(1.0)  # the head is gone, the agent headless; or all settled
        killed = time.time()
        os.kill(victim, signal.SIGKILL)
        heard: str = wait_for(lambda: (folder / "a").read_text() if (folder / "a").exists()
                              else None, lambda: None, 30, "the survivor told")
        return float(heard.split(" ", 1)[0]) - killed
    finally:
        end(job, home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--told", type=int, default=5, help="runs of the survivor told")
    args = parser.parse_args()
    results: dict[float, list[dict]] = {args.grace: [], 0.0: []}
    for i in range(args.runs):
        for grace in (args.grace, 0.0):  # interleaved: the machine's drift hits both
            with tempfile.TemporaryDirectory(prefix="mwrun-headless-") as folder:
                found = one(Path(folder), grace, args.window)
            results[grace].append(found)
            print(f"run {i + 1}, head_grace {grace:g}: " + json.dumps(
                {k: round(v, 3) if isinstance(v, float) else v for k, v in found.items()}),
                flush=True)
    print()
    for grace, runs in results.items():
        kept = [r["kept"] for r in runs]
        over = [r["over"] for r in runs]
        print(f"head_grace {grace:g}s: pace kept after the head's SIGKILL median"
              f" {statistics.median(kept):.2f} (min {min(kept):.2f}); same pids"
              f" {sum(r['same'] for r in runs)}/{len(runs)}; everything gone"
              f" {statistics.median(r['gone'] for r in runs):.2f} s after the kill, the"
              f" head machine's agent meanwhile"
              f" {statistics.median(max(r['agent_cpu'], 0) for r in runs):.2f} % CPU"
              f" (0 where it had gone),"
              f" grace outlasted by {statistics.median(over):.2f} s (max {max(over):.2f});"
              f" left after: {sum(len(r['left']) for r in runs)}")
    ratio = statistics.median(r["kept"] for r in results[args.grace])
    base = statistics.median(r["kept"] for r in results[0.0])
    print(f"pace kept headless, head_grace {args.grace:g}s vs none: {ratio:.2f} vs {base:.2f}")
    told: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.told):
        for headless in (True, False):  # interleaved
            with tempfile.TemporaryDirectory(prefix="mwrun-headless-") as folder:
                told[headless].append(told_once(Path(folder), headless))
    if args.told:
        away, here = (statistics.median(told[h]) for h in (True, False))
        print(f"a member SIGKILLed -> a peer that only watches told, median (max) of"
              f" {args.told}: head away {1000 * away:.0f} ms ({1000 * max(told[True]):.0f}),"
              f" head there {1000 * here:.0f} ms ({1000 * max(told[False]):.0f});"
              f" ratio {away / here:.2f}")


if __name__ == "__main__":
    main()
