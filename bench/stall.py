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

from common import exited, read_doc, run_over, wait_for

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
        # The flood's lines to nowhere (this script must not read them), the launch's
        # own words (a refusal) to a file, which never blocks it.
        said = work / "launch.err"
        with open(said, "w") as err:
            job = subprocess.Popen([PY, "-m", "mwrun", "launch", str(work / "flood.yaml"),
                                    "--run-id", "flood", "--grace", "1"],
                                   stdout=subprocess.DEVNULL, stderr=err, env=env)
        state = work / "home" / "runs" / "flood" / "state.json"

        def gone() -> str | None:
            return exited(job, said.read_text().splitlines()) or run_over(read_doc(state))

        def running() -> dict | None:
            doc = read_doc(state)
            return doc if doc and doc["state"] != "starting" else None

        try:
            doc = wait_for(running, gone, 120, "the flood's run running")
            control = doc["control"]
            logs = work / "home" / "runs" / "flood" / "logs" / "flood-0.log"
            wait_for(lambda: logs.exists() and logs.stat().st_size >= 8 << 20, gone, 120,
                     "8 MiB of flood in its log")  # the flood is on
            waits = [request(control, {"verb": "status"})[0] for _ in range(args.requests)]
            go.write_text("")
            while not Path(f"{go}.at").exists():
                time.sleep(0.005)
            time.sleep(0.05)
            crashed = float(Path(f"{go}.at").read_text())
            while True:
                _, reply = request(control, {"verb": "status"})
                crasher = reply and next(p for p in reply["status"]["processes"]
                                         if p["name"] == "crasher")
                if reply is None or crasher["state"] == "failed" or \
                        time.time() - crashed > 60:
                    seen = time.time() - crashed
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
