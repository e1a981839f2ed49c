"""Writes which of mwrun's modules a process found imported as it started, and which
mwrun it then imports, as JSON, to --out/PROCESS.json."""

import sys

at_start = sorted(m for m in sys.modules if m == "mwrun" or m.startswith("mwrun."))

import argparse  # noqa: E402  (after the look at sys.modules, which these would not change)
import json  # noqa: E402
import os  # noqa: E402

import mwrun  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
args = parser.parse_args()
fields = {"at_start": at_start, "origin": mwrun.__file__, "host": hasattr(mwrun, "host"),
          "own": getattr(mwrun, "OWN", False)}
with open(os.path.join(args.out, os.environ["MWRUN_PROCESS"] + ".json"), "w") as out:
    json.dump(fields, out)
