"""How long the supervisor keeps an exit or a request waiting while children flood it.

    python bench/stall.py                 # 2 flooding children, 10 status requests
    python bench/stall.py --flooders 4
    python bench/stall.py --colour        # lines full of colour sequences

Each flooding child writes 100-byte lines as fast as its pipe takes them (far more than
any terminal shows), with the console going to /dev/null. Measured meanwhile:

1. ``status`` round trips over the control socket (goal: max <= 50 ms plus the cost of
   the document itself);
2. a child's exit to the status document saying it failed (polled every 5 ms);
3. ``stop`` to the launcher's exit.

A request that gets no answer in 10 s counts as 10 s (the supervisor is stalled).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable
STALLED = 10.0


def request(path: str, message: dict) -> tuple[float, dict | None]:
    from mwrun.errors import RunError
    from mwrun.head.serve import control

    start = time.monotonic()
    try:
        reply = control.request(path, message, timeout=STALLED)
    except RunError:
        return STALLED, None
    return time.monotonic() - start, reply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flooders", type=int, default=2)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--colour", action="store_true",
                        help="lines full of colour sequences, through 1 MiB pipes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mwrun-bench-") as tmp:
        work = Path(tmp)
        go = work / "go"
        flood = [PY, str(HERE / "bin" / "flood.py"), *(["--colour"] if args.colour else [])]
        flooders = "".join(f"  flood-{i}: {{cmd: {json.dumps(flood)}}}\n"
                           for i in range(args.flooders))
        members = ", ".join([*(f"flood-{i}" for i in range(args.flooders)), "crasher"])
        (work / "flood.yaml").write_text(
            f"version: 1\nname: flood\nprocesses:\n{flooders}"
            f"  crasher: {{cmd: [{PY}, {HERE / 'bin' / 'crash_at.py'}, {go}]}}\n"
            f"worlds:\n  w: {{members: [{members}]}}\n")
        env = {**os.environ, "MWRUN_HOME": str(work / "home"), "NO_COLOR": "1"}
        job = subprocess.Popen([PY, "-m", "mwrun", "launch", str(work / "flood.yaml"),
                                "--run-id", "flood", "--grace", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        state = work / "home" / "runs" / "flood" / "state.json"
        try:
            while not state.exists() or json.loads(state.read_text())["state"] == "starting":
                time.sleep(0.1)
            control = json.loads(state.read_text())["control"]
            logs = work / "home" / "runs" / "flood" / "logs" / "flood-0.log"
            while not logs.exists() or logs.stat().st_size < 8 << 20:
                time.sleep(0.1)  # the flood is on
            waits = [request(control, {"verb": "status"})[0] for _ in range(args.requests)]
            go.write_text("")
            while not Path(f"{go}.at").exists():
                time.sleep(0.005)
            time.sleep(0.05)
            exited = float(Path(f"{go}.at").read_text())
            while True:
                _, reply = request(control, {"verb": "status"})
                crasher = reply and next(p for p in reply["status"]["processes"]
                                         if p["name"] == "crasher")
                if reply is None or crasher["state"] == "failed" or \
                        time.time() - exited > 60:
                    seen = time.time() - exited
                    break
                time.sleep(0.005)
            stop_at = time.monotonic()
            request(control, {"verb": "stop"})
            try:
                job.wait(timeout=60)
                stopped = time.monotonic() - stop_at
            except subprocess.TimeoutExpired:
                stopped = float("inf")
            total = sum(p.stat().st_size for p in logs.parent.iterdir())
        finally:
            job.kill()
            job.wait()
    ms = [w * 1000 for w in waits]
    kind = "coloured " if args.colour else ""
    print(f"{args.flooders} children flooding their output with {kind}lines"
          f" ({total / 2**20:.0f} MiB logged):")
    print(f"  status round trip   median {statistics.median(ms):7.1f} ms   max"
          f" {max(ms):7.1f} ms   ({STALLED:g} s = no answer)")
    print(f"  exit -> seen failed {seen * 1000:7.1f} ms")
    print(f"  stop -> launcher exit {stopped:6.2f} s")


if __name__ == "__main__":
    main()
