"""A drill's slow member: late to each call while the order lasts, then not at all."""

import time

from mwrun.worlds.lateness import Late


def test_late_while_the_order_lasts_then_over():
    late = Late(0.01, 60.0)
    began = time.monotonic()
    assert late.arrive() and time.monotonic() - began >= 0.01  # a sleep is never shorter
    assert not Late(5.0, 60.0, now=time.monotonic() - 61.0).arrive()  # over: no sleep
