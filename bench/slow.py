"""The slow member named, and never named where there is none (issue 35's figures).

    python bench/slow.py                          # about 30 minutes
    python bench/slow.py --shots 5 --quiet 60     # a quick look

A world of MEMBERS members (bin/reducer.py: each all_reduces 4 floats every 20 ms),
warm. Once it is healthy:

1. ``mwrun drill --signal SLOW --delay DELAY``: SHOTS members made late in turn (a seed
   whose schedule has exactly SHOTS), each timed from its late order until the head
   names it in ``status`` (the drill's own figure); goal: every one named within 10 s.
2. QUIET seconds of the healthy world, nothing late: every second ``status --json`` is
   read and the history's ``slow`` records counted; goal: no member named.
3. The same under load: LOAD busy processes beside the job (a load of 4 on this
   2-core machine); goal: no member named.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PY, Launched

from mwrun.cli import drill as d

HERE = Path(__file__).resolve().parent
NAMED = re.compile(r"^drill: (\S+) of w [\d.]+ ms late: (?:named after ([\d.]+)s|not named)")


def topology(folder: Path, members: int) -> Path:
    path = folder / "slow.yaml"
    path.write_text(
        f"version: 1\nname: slow\npreload: [torch]\nprocesses:\n  m:\n"
        f"    replicas: {members}\n    cmd: [{PY}, {HERE / 'bin' / 'reducer.py'}]\n"
        f"worlds:\n  w: {{members: [{', '.join(f'm-{i}' for i in range(members))}]}}\n")
    return path


def seed_for(shots: int, members: int) -> int:
    """The first seed whose schedule (--every 1 --for SHOTS) has exactly SHOTS."""
    hit = {"w": [(f"m-{i}", i) for i in range(members)]}
    return next(s for s in range(10000)
                if sum(1 for _ in d.schedule(s, 1.0, float(shots), hit)) == shots)


def mwrun(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "mwrun", *args], capture_output=True, text=True,
                          env={**os.environ, "MWRUN_HOME": str(home)})


def quiet(home: Path, seconds: float) -> tuple[int, int, list[str]]:
    """(seconds looked at, seconds a member was named, the members named)."""
    looked, named, who = 0, 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        doc = json.loads(mwrun(home, "status", "slow", "--json").stdout)
        slow = doc["worlds"][0]["slow"]
        looked += 1
        if slow is not None:
            named += 1
            who.append(slow["member"])
        time.sleep(1.0)
    return looked, named, who


def told(home: Path) -> list[str | None]:
    lines = (home / "runs" / "slow" / "history.jsonl").read_text().splitlines()
    return [r["member"] for r in map(json.loads, lines) if r.get("event") == "slow"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--shots", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--quiet", type=float, default=600.0, help="seconds per quiet span")
    parser.add_argument("--load", type=int, default=4, help="busy processes beside it")
    args = parser.parse_args()
    seed = seed_for(args.shots, args.members)
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder) / "home"
        job = Launched(topology(Path(folder), args.members), home, "--run-id", "slow")
        hogs: list[subprocess.Popen] = []
        try:
            job.healthy(600)
            time.sleep(12)  # a full window of the members' waits (WAIT_WINDOW)
            drilled = mwrun(home, "drill", "slow", "--signal", "SLOW", "--every", "1",
                            "--for", str(args.shots), "--seed", str(seed),
                            "--delay", str(args.delay))
            shots = [m.groups() for line in drilled.stdout.splitlines()
                     if (m := NAMED.match(line))]
            before = len(told(home))
            time.sleep(20)  # the last late member's window passes
            calm = quiet(home, args.quiet)
            calm_told = [m for m in told(home)[before + 1:] if m]
            hogs = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(args.load)]
            mark = len(told(home))
            loaded = quiet(home, args.quiet)
            loaded_told = [m for m in told(home)[mark:] if m]
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
            job.stop()
    load = ", ".join(f"{x:.1f}" for x in psutil.getloadavg())
    took = [float(t) for _, t in shots if t is not None]
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {psutil.cpu_count()} cores,"
          f" {platform.machine()}, Python {platform.python_version()}, load {load}")
    print(f"a world of {args.members} members all_reducing every 20 ms;"
          f" drill seed {seed}, exit {drilled.returncode}")
    print(f"  {len(shots)} members made {args.delay * 1e3:g} ms late: {len(took)} named,"
          f" {sum(t <= 10.0 for t in took)} within 10 s"
          + (f" (median {statistics.median(took):.1f} s, max {max(took):.1f} s)"
             if took else ""))
    for label, (looked, named, who), history in (("quiet", calm, calm_told),
                                                 (f"under load {args.load}", loaded,
                                                  loaded_told)):
        print(f"  healthy, {label}: {looked} looks over {args.quiet:g} s, a member named"
              f" in {named}{f' ({sorted(set(who))})' if who else ''}; told {len(history)}")


if __name__ == "__main__":
    main()
