"""Makes its zygote answer each fork late (1.5 s, longer than the supervisor's pause
between looks for orphans): a quick child has then ended before the supervisor knows
its pid, as happens now and then on a loaded machine."""

import time

from mwrun.host import zygote

_send = zygote.send


def _late(sock, message, fds=()):
    if "pid" in message:
        time.sleep(1.5)
    _send(sock, message, fds)


zygote.send = _late
