"""A drill's slow member (``mwrun kill-world W --signal SLOW``): the head's ``late``
order makes one member come ``delay`` seconds late to each of its calls in one world,
for ``hold`` seconds. The sleep comes before a call's wait is timed, so the late member
waits least, as a real straggler does."""

from __future__ import annotations

import time


class Late:
    """``delay`` seconds late to every call until ``until`` (monotonic)."""

    __slots__ = ("delay", "until")

    def __init__(self, delay: float, hold: float, now: float | None = None):
        self.delay = delay
        self.until = (time.monotonic() if now is None else now) + hold

    def arrive(self) -> bool:
        """Come late to this call while the order lasts; False once it is over."""
        if time.monotonic() >= self.until:
            return False
        time.sleep(self.delay)
        return True
