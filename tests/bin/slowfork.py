"""A preload module whose forks are slow: each fork made after its import waits
SLOWFORK_DELAY seconds in the child (0.25 by default). A zygote that imported it
takes that long (twice: it forks through a middle process) for every warm start, as
a loaded machine makes each one take long: a bring-up of many processes lasts a while
whatever the machine's pace."""

import os
import time

DELAY = float(os.environ.get("SLOWFORK_DELAY", "0.25"))
os.register_at_fork(after_in_child=lambda: time.sleep(DELAY))
