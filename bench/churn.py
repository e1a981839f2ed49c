"""Ten minutes of churn: faults and scale operations mixed, against the serving job.

    python bench/churn.py                    # 600 s, a fault or a scale every 10 s
    python bench/churn.py --for 120 --every 5
    python bench/churn.py --head 60          # the head SIGKILLed too, about once a minute

The serving job of examples/serving (a frontend answering 50 requests/s through its
workers, one world each; worker scale 1-8, two at launch) under ``mwrun drill --every
10 --for 600 --scale worker:1-8``: half the events SIGKILL a worker, half scale the
workers to a random count. Goals (issue 26): 0 of the frontend's calls failed by a
scale operation, 0 breaks in worlds no fault hit, every kill recovered, nothing left
running after ``mwrun stop``. Prints the drill's own summary and those four figures.
With ``--head S`` the head is SIGKILLed too (``mwrun drill --head``; the config gets
``head_grace: 60``, and a new head takes the run back each time): the same goals hold,
and the drill says how long the run was headless each time. The frontend's requests
are read from its log in the run folder, which outlives the heads.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bench.common import Launched  # noqa: E402
from tests.helpers import leftovers  # noqa: E402

PY = sys.executable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--for", dest="duration", type=float, default=600.0)
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--head", type=float, default=None,
                        help="also SIGKILL the head, mean seconds apart")
    args = parser.parse_args()
    began = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # The config as shipped, in its place, but for the restart budget: ten minutes of
        # kills would spend the default 3 of a worker hit often (issue 27: a drill's
        # kills should spend none).
        text = (ROOT / "configs" / "serve.yaml").read_text().replace("cwd: ..", f"cwd: {ROOT}")
        text = text.replace("restart: on-failure", "restart: on-failure\n    max_restarts: 1000")
        if args.head is not None:
            text += "head_grace: 60\n"
        (work / "serve.yaml").write_text(text)
        home = work / "home"
        job = Launched(work / "serve.yaml", home)
        env = {**os.environ, "MWRUN_HOME": str(home)}
        try:
            job.healthy(180)
            time.sleep(5.0)
            started = time.time()
            drill = subprocess.run([PY, "-m", "mwrun", "drill", "--every", str(args.every),
                                    "--for", str(args.duration), "--scale", "worker:1-8",
                                    "--seed", str(args.seed)]
                                   + ([] if args.head is None else ["--head", str(args.head)]),
                                   capture_output=True,
                                   text=True, env=env, timeout=args.duration + 900)
            took = time.time() - started
            frontend = subprocess.run([PY, "-m", "mwrun", "logs", "frontend"], env=env,
                                      capture_output=True, text=True, timeout=60).stdout
        finally:
            subprocess.run([PY, "-m", "mwrun", "stop"], env=env, capture_output=True,
                           timeout=120)
            job.popen.wait(timeout=120)
        time.sleep(3.0)
        left = leftovers(home)
        run = next((home / "runs").iterdir())
        record = next(json.loads(line) for line in
                      reversed((run / "history.jsonl").read_text().splitlines())
                      if '"event": "drill"' in line)
    print(drill.stdout[-6000:])
    said = frontend.splitlines()  # (its log: the launch's console ends with its head)
    failed = [line for line in said if line.startswith("request ") and "failed" in line]
    failed_by_scale = [line for line in failed if "SIGKILL" not in line]
    scale = record.get("scale") or {}
    outside = record.get("outside") or {}
    print(f"churn {took:.0f} s, load {began[0]:.1f} -> {os.getloadavg()[0]:.1f}:"
          f" drill exit {drill.returncode};"
          f" faults {sum(w['faults'] for w in record['worlds'].values())},"
          f" not recovered {len(record.get('not_recovered', []))};"
          f" scale operations {scale.get('count')}, done {scale.get('done')},"
          f" failed {scale.get('failed')};"
          f" frontend requests failed {len(failed)}, by no kill {len(failed_by_scale)};"
          f" outside the faulted worlds: {outside};"
          f" head kills {record.get('head', {}).get('kills', 0)},"
          f" back median {record.get('head', {}).get('back_median')} s;"
          f" processes left after stop {len(left)}")


if __name__ == "__main__":
    main()
