"""A member that joins its worlds (the real library, torch and gloo) and then idles in
time.sleep: what ``mwrun stacks`` reads on many members (bench/postmortem.py)."""

import time

import mwrun

job = mwrun.init()
while True:
    time.sleep(1)
