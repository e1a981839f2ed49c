"""Joins its worlds (the supervisor link is open), then logs --lines lines through the
root logger its package set up at import (preloaded, when warm), and says how many it
wrote."""

import argparse
import logging

import mwrun
import tests.bin.preloads.logfile  # noqa: F401  # its import opens the log file

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=20000)
args = parser.parse_args()

job = mwrun.init()
log = logging.getLogger("chatty")
for i in range(args.lines):
    log.info("line %d of a chatty logger, padded to make it long enough to fill buffers", i)
print("logged", args.lines, flush=True)
job.close()
