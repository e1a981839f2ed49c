"""Warm starts against cold ones (``preload: false``), side by side in one run.

    python bench/warm.py                    # ~10 min on 2 cores
    python bench/warm.py --kills 5 --runs 1 --big 0

1. Recovery: a two-rank gloo world (bin/drill_hub.py, bin/drill_member.py); the member
   is SIGKILLed while the hub is blocked in a recv, --apart seconds after the previous
   kill (6 s: past the 5 s after which a restarted process is healthy again, so every
   kill is a fresh fault, restarted at once with the default restart_backoff); time
   from the kill until the world has completed an all_reduce again with the restarted
   member (goal, warm: median <= 0.3 s, max <= 0.6 s).

"warm" is mwrun's default (the topologies say nothing of preload), "cold" says
``preload: false``; every other setting is the default too, but ``max_restarts``.
2. Launch: from starting ``mwrun launch`` to every rank's first all_reduce, N = 2, 4, 8
   (bin/ring.py; goal, warm: <= one ``import torch`` + 1 s at every N).
3. Memory: unique memory (USS) of each of 8 idle ranks (bin/idle_rank.py), warm against
   cold (goal: <= 60 MB per warm rank); and --big warm ranks idling, with their total.
4. The README's drill: ``mwrun kill-world world1`` on configs/star.yaml, time from the
   kill until the leader prints ``world1 re-formed``.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Launched, wait_for
from compare_torchrun import Job
from supervisor import import_torch_seconds

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
# The topology's preload line per mode: warm starts are the default, so warm says nothing.
MODES = {"warm": "", "cold": "preload: false\n"}


def recovery(work: Path, preload: str, count: int, apart: float) -> list[float]:
    topology = work / f"drill-{_tag(preload)}.yaml"
    topology.write_text(f"""\
version: 1
name: drill
{preload}processes:
  hub: {{cmd: [{PY}, {HERE / 'bin' / 'drill_hub.py'}]}}
  member:
    cmd: [{PY}, {HERE / 'bin' / 'drill_member.py'}]
    restart: on-failure
    max_restarts: {count + 5}
worlds:
  w: {{members: [hub, member]}}
""")
    job = Launched(topology, work / "home")
    took = []
    try:
        job.expect("hub", "ready")
        killed = time.monotonic()
        for _ in range(count):
            pid = job.expect("member", "member")["pid"]
            # --apart after the last kill, and the hub blocked in its recv by now
            time.sleep(max(killed + apart - time.monotonic(), 0.3))
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            took.append(job.expect("hub", "ready")["t"] - killed)
    finally:
        job.stop()
    return took


def ring_topology(work: Path, n: int, preload: str, script: str = "ring.py") -> Path:
    args = ", --api, mwrun" if script == "ring.py" else ""
    topology = work / f"{script[:-3]}{n}-{_tag(preload)}.yaml"
    topology.write_text(f"""\
version: 1
name: ring
{preload}processes:
  rank:
    replicas: {n}
    cmd: [{PY}, {HERE / 'bin' / script}{args}]
worlds:
  ring: {{members: [rank]}}
""")
    return topology


def launch(work: Path, n: int, preload: str) -> float:
    job = Job([PY, "-m", "mwrun", "launch", str(ring_topology(work, n, preload))],
              {"MWRUN_HOME": str(work / "home")})
    try:
        job.require(lambda: len(job.firsts()) == n, 180, f"N={n} {_tag(preload)}: every rank"
                    " started")
        return max(ev["t"] for ev in job.firsts().values()) - job.started
    finally:
        job.stop()


def memory(work: Path, n: int, preload: str) -> tuple[list[int], int]:
    """USS of each rank, and the zygote's RSS (0 when cold), once all are idle."""
    job = Job([PY, "-m", "mwrun", "launch", str(ring_topology(work, n, preload,
                                                              "idle_rank.py"))],
              {"MWRUN_HOME": str(work / "home")})
    try:
        idle = lambda: [e for e in job.events if e.get("e") == "idle"]  # noqa: E731
        job.require(lambda: len(idle()) == n, 300, f"memory N={n} {_tag(preload)}: every rank"
                    " idle")
        time.sleep(2.0)
        uss = [psutil.Process(e["pid"]).memory_full_info().uss for e in idle()]
        zygote = [c for c in psutil.Process(job.popen.pid).children(recursive=True)
                  if " ".join(c.cmdline()).startswith("mwrun zygote")]  # (its agent's)
        return uss, sum(z.memory_info().rss for z in zygote)
    finally:
        job.stop()


def drill(work: Path, preload: str, count: int) -> list[float]:
    topology = work / f"star-{_tag(preload)}.yaml"
    text = (ROOT / "configs" / "star.yaml").read_text()
    topology.write_text(text.replace("backend: gloo", f"backend: gloo\n{preload}".rstrip())
                        .replace("cwd: ..", f"cwd: {ROOT}"))  # the star runs until stopped
    # A home of its own: an earlier part's ended run, in a shared one, was taken for
    # this one's end. The star's commands say ``python``: the one running this bench,
    # as in the README (its venv activated), not another on the PATH without torch.
    home = work / f"home-drill-{_tag(preload)}"
    job = Launched(topology, home, env={"PATH": f"{Path(PY).parent}:{os.environ['PATH']}"})
    took = []

    def seen(text: str) -> int:
        return sum(text in line for line in list(job.lines))

    def wait(condition, what: str) -> None:
        # Lines arrive on a thread; 5 ms is below what we measure.
        wait_for(condition, job.gone, 120, f"drill {_tag(preload)}: {what}", every=0.005)

    try:
        wait(lambda: seen("every world formed"), "start")
        for _ in range(count):
            time.sleep(6.0)  # up past the 5 s a crash loop needs to end: a fresh fault
            before = seen("world1 re-formed")
            killed = time.monotonic()
            subprocess.run([PY, "-m", "mwrun", "kill-world", "world1"], check=True,
                           capture_output=True, env={**os.environ, "MWRUN_HOME": str(home)})
            wait(lambda b=before: seen("world1 re-formed") > b, "re-forming")
            took.append(time.monotonic() - killed)
    finally:
        job.stop()
    return took


def _tag(preload: str) -> str:
    return "cold" if preload else "warm"


def mb(values) -> str:
    return f"{statistics.median(values) / 2**20:.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--apart", type=float, default=6.0,
                        help="seconds from one kill to the next (recovery)")
    parser.add_argument("--runs", type=int, default=3, help="launches per N and mode")
    parser.add_argument("--drills", type=int, default=5)
    parser.add_argument("--big", type=int, default=64, help="warm ranks idling (0: skip)")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d')} {platform.node()}: {os.cpu_count()} CPUs,"
          f" {psutil.virtual_memory().total / 2**30:.0f} GiB, Python"
          f" {platform.python_version()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="mwrun-bench-") as tmp:
        work = Path(tmp)
        torch_import = import_torch_seconds()
        print(f"python -c 'import torch': median {torch_import:.2f} s", flush=True)
        for mode, preload in MODES.items():
            load = os.getloadavg()[0]
            took = recovery(work, preload, args.kills, args.apart)
            print(f"kill -> communicating again, {mode}: median {statistics.median(took):.3f} s,"
                  f" max {max(took):.3f} s ({args.kills} kills {args.apart:g} s apart; load"
                  f" average {load:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)
        for n in (2, 4, 8):
            runs = {mode: [] for mode in MODES}
            for _ in range(args.runs):
                for mode, preload in MODES.items():  # interleaved
                    runs[mode].append(launch(work, n, preload))
            print(f"launch to every first all_reduce, N={n}: " + ", ".join(
                f"{mode} {statistics.median(v):.2f} s" for mode, v in runs.items())
                + f" (goal warm <= {torch_import + 1:.2f} s)", flush=True)
        for mode, preload in MODES.items():
            uss, zygote = memory(work, 8, preload)
            print(f"USS of 8 idle ranks, {mode}: median {mb(uss)} (min {min(uss) / 2**20:.0f},"
                  f" max {max(uss) / 2**20:.0f}); zygote RSS {zygote / 2**20:.0f} MB",
                  flush=True)
        for mode, preload in MODES.items():
            took = drill(work, preload, args.drills)
            print(f"README drill, kill-world world1 -> re-formed, {mode}: median"
                  f" {statistics.median(took):.2f} s, max {max(took):.2f} s", flush=True)
        if args.big:
            uss, zygote = memory(work, args.big, MODES["warm"])
            total = sum(uss) + zygote
            print(f"{args.big} warm ranks idling: USS median {mb(uss)}, total (USS of all +"
                  f" zygote RSS) {total / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
