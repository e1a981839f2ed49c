"""The head's work on a tick with nothing due, at 10 and at 1,000 processes: what the
supervisor costs a job that is only running (every member joined and beating on time).

    python bench/ticks.py                              # this checkout
    python bench/ticks.py --baseline /path/to/checkout # and another, side by side

bench/bin/idle_tick.py, on a scripted host (no processes, no sockets, as
bench/bin/one_exit.py): every process says hello (it beats every second), joins its
world, and beats once a tick; then the supervisor's ``on_tick`` is timed at each tick.
Its ratio 1,000 / 10 is what "nothing scans every process on a tick" means: a tick
should cost what is due, not what runs. Printed with the hang checks a tick made and
its Python calls (the work itself, free of the cache's and the clock's noise).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(checkout: Path | None) -> dict:
    env = {**os.environ, **({"PYTHONPATH": str(checkout)} if checkout else {})}
    # A fresh interpreter per checkout (PYTHONPATH), run from elsewhere.
    result = subprocess.run([sys.executable, str(HERE / "bin" / "idle_tick.py")], env=env,
                            capture_output=True, text=True, cwd=tempfile.gettempdir())
    if result.returncode != 0:
        sys.exit(f"the tick bench did not run in {checkout or 'this checkout'}:\n"
                 f"{result.stderr.strip()}")
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to run side by side")
    args = parser.parse_args()
    runs = [("this", None)] + ([("baseline", args.baseline)] if args.baseline else [])
    for label, checkout in runs:
        found = measure(checkout)
        small, large = found["10"], found["1000"]
        print(f"[{label}] a tick with nothing due: {small['seconds'] * 1e6:.1f} us at 10"
              f" processes ({small['checks']:.1f} hang checks, {small['calls']} calls),"
              f" {large['seconds'] * 1e6:.1f} us at 1,000 ({large['checks']:.1f} hang"
              f" checks, {large['calls']} calls): ratio in time"
              f" {large['seconds'] / small['seconds']:.2f}, in calls"
              f" {large['calls'] / small['calls']:.2f} (goal <= 1.5)")


if __name__ == "__main__":
    main()
