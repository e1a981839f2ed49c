"""Remake the README's drill picture: the star, one kill-world, then mwrun report.

    python bench/drill_report.py                  # writes docs/drill-report.png
    python bench/drill_report.py -o /tmp/my.png

Launches configs/star.yaml in the background under a fresh MWRUN_HOME, waits until both
worlds have been healthy for a few seconds, kills world1 (worker-0), waits until world1
has re-formed and run a few seconds more, stops the run and draws its report.
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


def mwrun(*args: str, env: dict) -> str:
    done = subprocess.run([sys.executable, "-m", "mwrun", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"mwrun {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def wait_until(what: str, check, env: dict, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = json.loads(mwrun("status", "drill", "--json", env=env))
        if check({w["name"]: w for w in doc["worlds"]}):
            return
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=str(ROOT / "docs" / "drill-report.png"))
    parser.add_argument("--settle", type=float, default=6.0,
                        help="seconds of steady traffic before the kill and after the re-form")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "MWRUN_HOME": home, "NO_COLOR": "1"}
        mwrun("launch", "configs/star.yaml", "--detach", "--run-id", "drill", env=env)
        try:
            wait_until("both worlds healthy", lambda w: all(
                (x["healthy_for_s"] or 0) >= args.settle for x in w.values()), env)
            print(mwrun("kill-world", "world1", "drill", env=env), end="")
            wait_until("world1 re-formed", lambda w: w["world1"]["generation"] == 1 and (
                w["world1"]["healthy_for_s"] or 0) >= args.settle, env)
        finally:
            mwrun("stop", "drill", env=env)
        print(mwrun("report", "drill", "-o", args.output, env=env), end="")


if __name__ == "__main__":
    main()
