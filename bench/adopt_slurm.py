"""``mwrun adopt`` under Slurm: a pair job across the two nodes of a real Slurm cluster
(slurmctld, two slurmds, munge; node two a network namespace: tests/integration/
slurmbed.py), launched in ``salloc``; its head SIGKILLed, then ``mwrun adopt`` run
outside the allocation, which finds each node's agent with an ``srun --jobid --overlap``
of its own. Measured each round: from ``adopt``'s start until the new head has the run
(every process running under the pid it had, the world healthy), and the counts kept
meanwhile (1.0: the job never noticed); the baseline, in the same rounds: the job
launched again cold in ``salloc`` until healthy (what a dead head meant before).

    python bench/adopt_slurm.py              # as root, Slurm and munge installed; ~1 min
    python bench/adopt_slurm.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.adopt import count, taken  # noqa: E402
from bench.common import PY, ended, state_doc, wait_for  # noqa: E402
from tests.integration import slurmbed  # noqa: E402


def topology(folder: Path) -> Path:
    out = folder / "count"
    cmd = json.dumps([PY, str(ROOT / "tests" / "bin" / "pair.py"), "--interval", "0.01",
                      "--out", str(out)])
    path = folder / "pair.yaml"
    path.write_text(f"version: 1\nname: pair\nlauncher: slurm\nhead_grace: 120\n"
                    f"hosts:\n  first: {{}}\n  second: {{}}\nprocesses:\n"
                    f"  a: {{cmd: {cmd}, host: first, restart: on-failure}}\n"
                    f"  b: {{cmd: {cmd}, host: second, restart: on-failure}}\n"
                    f"worlds:\n  w: {{members: [a, b]}}\n")
    return path


def status(env: dict) -> dict | None:
    done = subprocess.run([PY, "-m", "mwrun", "status", "--json"], env=env,
                          capture_output=True, text=True, timeout=30)
    try:
        return json.loads(done.stdout)
    except ValueError:
        return None


def one_round(folder: Path, env: dict) -> dict:
    home = folder / "home"
    base = {**env, "MWRUN_HOME": str(home), "NO_COLOR": "1"}
    outside = {k: v for k, v in base.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    done = folder / "done"
    began = time.monotonic()
    alloc = subprocess.Popen(["salloc", "-N2", "sh", "-c", f"{PY} -m mwrun launch"
                              f" {topology(folder)}; until [ -e {done} ]; do sleep 0.2; done"],
                             env=base, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    adopt = None
    try:
        # Asked on the head's control socket, as bench/adopt.py asks (``taken``).
        control = wait_for(lambda: (state_doc(home) or {}).get("control"), lambda: None, 120,
                           "the run", every=0.05)
        doc = wait_for(lambda: taken(control, 1), lambda: None, 120, "the job healthy",
                       every=0.05)
        cold = time.monotonic() - began
        pids = {p["name"]: p["pid"] for p in doc["processes"]}
        os.kill(doc["supervisor_pid"], signal.SIGKILL)
        wait_for(lambda: (status(base) or {}).get("head"), lambda: None, 30, "the head away")
        first = count(folder)
        time.sleep(1.0)  # the pace headless, before the new head
        before = count(folder) - first
        first, since = count(folder), time.monotonic()
        adopt = subprocess.Popen([PY, "-m", "mwrun", "adopt"], env=outside,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: taken(control, 2, pids), lambda: None, 60, "adopted", every=0.05)
        took = time.monotonic() - since
        pace = (count(folder) - first) / took / before if before else 0.0
        subprocess.run([PY, "-m", "mwrun", "stop"], env=base, capture_output=True, timeout=60)
        ended(adopt, 60)
        return {"cold": cold, "adopt": took, "pace": pace}
    finally:
        done.touch()
        ended(alloc, 60)
        if adopt is not None:
            ended(adopt, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if slurmbed.missing():
        raise SystemExit(f"cannot make a Slurm cluster here: {slurmbed.missing()}")
    found = []
    with tempfile.TemporaryDirectory(prefix="mwrun-adopt-slurm-") as work, \
            slurmbed.cluster(Path(work)) as (env, _n2, _nodes):
        for i in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="round-", dir=work) as folder:
                found.append(one_round(Path(folder), env))
            print(f"round {i + 1}: cold launch in salloc until healthy"
                  f" {found[-1]['cold'] * 1000:.0f} ms; mwrun adopt (outside the allocation)"
                  f" until adopted with every pid {found[-1]['adopt'] * 1000:.0f} ms; pace"
                  f" kept {found[-1]['pace']:.2f}", flush=True)
    slurmbed.close()
    adopt = statistics.median(f["adopt"] for f in found)
    cold = statistics.median(f["cold"] for f in found)
    print(f"\nUnder Slurm, median of {len(found)}: mwrun adopt until the run is taken back"
          f" {adopt * 1000:.0f} ms (every pid kept, the world healthy; srun to each node's"
          f" door included); launched again cold {cold * 1000:.0f} ms; adopt / cold"
          f" {adopt / cold:.2f}; pace kept median"
          f" {statistics.median(f['pace'] for f in found):.2f}")


if __name__ == "__main__":
    main()
