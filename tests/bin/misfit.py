"""By hand: add world B told a size of its own (--size), which its peer may not share;
prints what job.add_world said, and how long it took."""

import argparse
import json
import time

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, required=True)
parser.add_argument("--size", type=int, required=True)
parser.add_argument("--port-a", type=int, required=True)
parser.add_argument("--port-b", type=int, required=True)
parser.add_argument("--timeout", type=float, required=True)
args = parser.parse_args()

job = mwrun.init(worlds={"A": mwrun.WorldSpec(rank=0, size=1, port=args.port_a)})
start = time.monotonic()
try:
    job.add_world("B", mwrun.WorldSpec(rank=args.rank, size=args.size, port=args.port_b),
                  timeout=args.timeout)
    said = {"formed": True}
except mwrun.BrokenWorldError as exc:
    said = {"kind": type(exc).__name__, "reason": exc.reason}
print(json.dumps({**said, "took": time.monotonic() - start, "worlds": sorted(job.worlds)}),
      flush=True)
job.close()
