"""A member that does nothing with its world but watch it: the first break it hears of
(``job.events()``) is written to --out as "SECONDS REASON" (the wall clock), then it
exits. No collective can tell it a peer died: only the world's store does."""

import argparse
import os
import time

import mwrun

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
args = parser.parse_args()

job = mwrun.init()
print("watching", flush=True)
for event in job.events():
    if event.kind == "broken":
        with open(args.out + ".tmp", "w") as file:
            file.write(f"{time.time()} {event.reason}")
        os.replace(args.out + ".tmp", args.out)
        break
