"""How fast mwrun notices and repairs a failure, and what watching costs.

    python bench/supervisor.py              # 25 kills, 64 idle processes for 30 s
    python bench/supervisor.py --kills 5 --watch 10

1. A member of a two-rank world is SIGKILLed while its peer is blocked in a recv that
   only the member could answer: time from the kill to BrokenWorldError in the peer
   (goal: median <= 50 ms, max <= 250 ms).
2. From the same kill to the world doing collectives again with the restarted member,
   beside a bare ``python -c "import torch"`` timed in the same run (goal: <= that + 1 s).
3. The supervisor's CPU while it watches 64 idle members, each heartbeating like the
   library does (goal: <= 1 % of a core).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
if __package__:  # bench.supervisor, the checkout's root on the path
    from bench.common import Launched
else:  # a script, or ``supervisor`` with its folder on the path
    from common import Launched
PY = sys.executable


def import_torch_seconds(times: int = 5) -> float:
    samples = []
    for _ in range(times):
        start = time.monotonic()
        subprocess.run([PY, "-c", "import torch"], check=True, capture_output=True)
        samples.append(time.monotonic() - start)
    return statistics.median(samples)


def kills(work: Path, count: int) -> tuple[list[float], list[float]]:
    topology = work / "drill.yaml"
    topology.write_text(f"""\
version: 1
name: drill
timeout: 30
processes:
  hub: {{cmd: [{PY}, {HERE / 'bin' / 'drill_hub.py'}]}}
  member:
    cmd: [{PY}, {HERE / 'bin' / 'drill_member.py'}]
    restart: on-failure
    max_restarts: {count + 5}
    restart_backoff: 0
worlds:
  w: {{members: [hub, member]}}
""")
    job = Launched(topology, work / "home")
    broken, recovered = [], []
    try:
        job.expect("hub", "ready")
        for _ in range(count):
            pid = job.expect("member", "member")["pid"]
            time.sleep(0.3)  # the hub is blocked in its recv by now
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            broken.append(job.expect("hub", "broken")["t"] - killed)
            recovered.append(job.expect("hub", "ready")["t"] - killed)
    finally:
        job.stop()
    return broken, recovered


def watching(work: Path, processes: int, seconds: float) -> float:
    lines = ["version: 1", "name: idle", "processes:", "  idle:",
             f"    replicas: {processes}", f"    cmd: [{PY}, {HERE / 'bin' / 'idle_member.py'}]",
             "worlds:"]
    for i in range(0, processes, 2):
        lines.append(f"  w{i // 2}: {{members: [idle-{i}, idle-{i + 1}]}}")
    topology = work / "idle.yaml"
    topology.write_text("\n".join(lines) + "\n")
    job = Launched(topology, work / "home")
    try:
        job.healthy(120, "idle-*")
        time.sleep(2.0)
        return cpu_percent(job.popen.pid, seconds)
    finally:
        job.stop()


def control_plane(pid: int) -> list[psutil.Process]:
    """The head ``pid`` and, where it has them, the worlds' stores' keeper (a process of
    its own since stop 45; before, the stores were threads of the head) and the agent of
    the head's machine (since stop 46: it does what the head's own hands did, and its
    watchdog): what mwrun itself spends, compared whole with a checkout without them.
    Searched among the head's descendants (the keeper is its agent's child)."""
    head = psutil.Process(pid)
    parts = []
    for child in head.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            argv = child.cmdline()  # (an ssh client to a remote agent is not one)
            if argv[1:4] == ["-m", "mwrun", "agent"] or any(
                    part in " ".join(argv) for part in ("mwrun.keeper", "mwrun.host.watchdog")):
                parts.append(child)
    return [head, *parts]


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def cpu_percent(pid: int, seconds: float) -> float:
    """Percent of one core mwrun's control plane (the head ``pid`` and its keeper)
    uses over the next ``seconds``."""
    procs = control_plane(pid)
    before = cpu_seconds(procs)
    start = time.monotonic()
    time.sleep(seconds)
    used = cpu_seconds(procs) - before
    return 100.0 * used / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--watch", type=float, default=30.0, help="seconds of idle watching")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mwrun-bench-") as tmp:
        work = Path(tmp)
        torch_import = import_torch_seconds()
        broken, recovered = kills(work, args.kills)
        cpu = watching(work, args.processes, args.watch)
    ms = [b * 1000 for b in broken]
    print(f"{args.kills} kills of a member whose peer was blocked in a recv:")
    print(f"  kill -> BrokenWorldError  median {statistics.median(ms):6.1f} ms   max"
          f" {max(ms):6.1f} ms   (goal: median <= 50, max <= 250)")
    print(f"  kill -> collectives again median {statistics.median(recovered):6.2f} s    max"
          f" {max(recovered):6.2f} s    (goal: <= import torch + 1 s"
          f" = {torch_import + 1:.2f} s)")
    print(f"  python -c 'import torch'  median {torch_import:6.2f} s    (same run)")
    print(f"supervisor watching {args.processes} idle processes for {args.watch:g} s:"
          f" {cpu:.2f} % of a core (goal: <= 1 %)")


if __name__ == "__main__":
    main()
