"""Remake the README's drill picture from a real ``mwrun drill``: a star of a leader and
4 workers, a fault every 10 s (mean) for 2 minutes, then ``mwrun report``.

    python bench/drill_report.py                  # writes docs/drill-report.png
    python bench/drill_report.py -o /tmp/my.png --for 60

Launches the star (examples/send_recv, each worker sending every 0.1 s so that a
world's pace is counted to a few calls in a thousand) in the background under a fresh
MWRUN_HOME, lets every world run fault-free for --settle seconds (the drill's
fault-free pace), runs ``mwrun drill``, stops the run, draws its report and prints
the drill's figures: pace kept by the faulted worlds and by the others, downtime.

mwrun's settings are the defaults, except ``preload: [torch]``: warm starts are not
yet the default on this branch (issue 19 item 1); once they are, drop that line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 4

TOPOLOGY = """\
version: 1
name: drill
preload: [torch]   # warm starts: drop once they are the default (issue 19 item 1)
processes:
  leader:
    cmd: python examples/send_recv/leader.py
    cwd: {root}
    restart: on-failure
  worker:
    replicas: {workers}
    cmd: python examples/send_recv/worker.py --steps 1000000 --interval 0.1
    cwd: {root}
    restart: on-failure
    max_restarts: 1000
worlds:
{worlds}
"""


def mwrun(*args: str, env: dict, check: bool = True, live: bool = False) -> str:
    done = subprocess.run([sys.executable, "-m", "mwrun", *args], env=env, cwd=ROOT,
                          stdout=None if live else subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=900)
    if check and done.returncode != 0:
        raise SystemExit(f"mwrun {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout or ""


def wait_healthy(env: dict, settle: float, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = json.loads(mwrun("status", "drill", "--json", env=env, check=False) or "{}")
        worlds = doc.get("worlds") or []
        if worlds and all((w["healthy_for_s"] or 0) >= settle for w in worlds):
            return
        time.sleep(0.5)
    raise SystemExit("timed out waiting for every world to be healthy")


def figures(home: str) -> dict:
    history = Path(home) / "runs" / "drill" / "history.jsonl"
    [record] = [r for r in map(json.loads, history.read_text().splitlines())
                if r.get("event") == "drill"]
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=str(ROOT / "docs" / "drill-report.png"))
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--for", dest="duration", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds of fault-free traffic before the drill")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "MWRUN_HOME": home, "NO_COLOR": "1"}
        topology = Path(home) / "drill.yaml"
        topology.write_text(TOPOLOGY.format(root=ROOT, workers=WORKERS, worlds="\n".join(
            f"  world{i + 1}: {{members: [leader, worker-{i}]}}" for i in range(WORKERS))))
        load_before = os.getloadavg()
        mwrun("launch", str(topology), "--detach", "--run-id", "drill", env=env)
        try:
            wait_healthy(env, args.settle)
            mwrun("drill", "drill", "--every", str(args.every), "--for", str(args.duration),
                  "--seed", str(args.seed), env=env, check=False, live=True)
        finally:
            mwrun("stop", "drill", env=env)
        load_after = os.getloadavg()
        mwrun("report", "drill", "-o", args.output, env=env)
        record = figures(home)
    # One downtime per outage: a fault that hit a world still down joined its outage.
    downs = sorted(f["downtime"] for w in record["worlds"].values() for f in w["list"]
                   if f["downtime"] is not None and not f.get("again"))
    faults = sum(w["faults"] for w in record["worlds"].values())
    print(f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, load average"
          f" {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print(f"{faults} faults in {args.duration:.0f} s (--every {args.every:g}, seed"
          f" {args.seed}); not recovered: {len(record['not_recovered'])}")
    if downs:
        middle = len(downs) // 2
        median = downs[middle] if len(downs) % 2 else (downs[middle - 1] + downs[middle]) / 2
        print(f"downtime of {len(downs)} outages (t_fault -> first call, else re-form):"
              f" median {median:.3f} s, max {downs[-1]:.3f} s (goal <= 0.3 s, <= 0.6 s)")
    print(f"pace kept: faulted worlds {_pct(record['kept_faulted'])} (goal >= 97.7 %),"
          f" others during each fault {_pct(record['kept_others'])} (goal >= 99 %)")
    for name, w in record["worlds"].items():
        print(f"  {name}: {w['faults']} fault(s), kept {_pct(w['kept'])}")
    print(f"picture: {args.output}")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


if __name__ == "__main__":
    main()
