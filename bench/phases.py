"""The phases of a fault (head/faults.py), measured by mwrun itself on real drills.

    python bench/phases.py                  # 10 kills, about a minute
    python bench/phases.py --kills 20 --preload false

A two-rank gloo world (bin/drill_hub.py, bin/drill_member.py), warm starts
(``preload: [torch]``); ``mwrun kill-world w --rank 1`` SIGKILLs the member,
``--every`` seconds apart, each after the last fault's record is in history.jsonl.
Each phase's median and max is printed as the time after ``t_fault`` (the signal
sent), from the ``fault`` records the head wrote (goals: kill -> survivors_told
<= 50 ms, kill -> reformed <= 0.3 s median).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Launched, wait_for

HERE = Path(__file__).resolve().parent
PY = sys.executable
RUN = "phases"
PHASES = ("exit_seen", "survivors_told", "restarted", "reformed", "first_call")


def faults(history: Path) -> list[dict]:
    if not history.exists():
        return []
    records = [json.loads(line) for line in history.read_text().splitlines()]
    return [r for r in records if r.get("event") == "fault"]


def run(work: Path, kills: int, every: float, preload: str) -> list[dict]:
    topology = work / "drill.yaml"
    topology.write_text(f"""\
version: 1
name: drill
preload: {preload}
processes:
  hub: {{cmd: [{PY}, {HERE / 'bin' / 'drill_hub.py'}]}}
  member:
    cmd: [{PY}, {HERE / 'bin' / 'drill_member.py'}]
    restart: on-failure
    max_restarts: {kills + 5}
    restart_backoff: 0
worlds:
  w: {{members: [hub, member]}}
""")
    home = work / "home"
    env = {**os.environ, "MWRUN_HOME": str(home)}
    job = Launched(topology, home, "--run-id", RUN)
    history = home / "runs"
    try:
        job.expect("hub", "ready", timeout=120)
        [run_dir] = list(history.iterdir())
        for kill in range(kills):
            time.sleep(every)
            done = subprocess.run([PY, "-m", "mwrun", "kill-world", "w", RUN, "--rank", "1"],
                                  env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"kill-world: {done.stderr.strip()}")
            wait_for(lambda k=kill: len(faults(run_dir / "history.jsonl")) > k, job.gone, 60,
                     f"fault {kill + 1} closed", every=0.05)
    except SystemExit:
        print("\n".join(job.lines[-30:]), file=sys.stderr)
        raise
    finally:
        job.stop()
    return faults(run_dir / "history.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between kills")
    parser.add_argument("--preload", default="[torch]", help="[torch] (warm) or false")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, {platform.machine()},"
          f" Python {platform.python_version()}, load {os.getloadavg()[0]:.1f},"
          f" preload: {args.preload}", flush=True)
    with tempfile.TemporaryDirectory(prefix="mwrun-phases-") as tmp:
        records = run(Path(tmp), args.kills, args.every, args.preload)
    ordered = sum(1 for r in records if None not in r["phases"].values()
                  and list(r["phases"].values()) == sorted(r["phases"].values()))
    print(f"{len(records)} faults, {ordered} with every phase, in order; each phase after"
          " t_fault (the signal sent):")
    for phase in PHASES:
        after = [r["phases"][phase] - r["phases"]["t_fault"] for r in records
                 if r["phases"][phase] is not None and r["phases"]["t_fault"] is not None]
        if after:
            print(f"  kill -> {phase:15} median {statistics.median(after) * 1000:7.1f} ms,"
                  f" max {max(after) * 1000:7.1f} ms ({len(after)} of {len(records)})")
        else:
            print(f"  kill -> {phase:15} never")


if __name__ == "__main__":
    main()
