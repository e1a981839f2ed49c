"""A preload module whose forks are slow: each fork made after its import waits
SLOWFORK_DELAY seconds (0.5 by default) in the process that forks, before the fork. A
zygote that imported it takes that long for every warm start, as a loaded machine makes
each fork take long (the zygote forks one child at a time, however many it has asked
of it: host/zygote.py): a bring-up of many processes lasts a while whatever the
machine's pace."""

import os
import time

DELAY = float(os.environ.get("SLOWFORK_DELAY", "0.5"))
os.register_at_fork(before=lambda: time.sleep(DELAY))
