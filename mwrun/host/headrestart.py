"""A head that died is started again on its own machine (``head_restart``).

The agent of the head's machine is the first to know that its head died (its link
closes), and it keeps the job going for ``head_grace``. With ``head_restart`` it also
starts a new head at once, ``mwrun adopt RUN`` (head/adopting.py), in a session of its
own, its console going to the run folder's ``supervisor.log``. A head that dies again
soon after it adopted the run (or that ends without adopting it) is in a crash loop:
the next start waits a backoff that doubles (1, 2, 4 ... 30 s), and after ``TRIES`` in
a row the agent starts no more; the grace then runs out as it would have. A stop the
head asked for is no death: the agent ends with the job, starting nothing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

BACKOFF = 1.0  # seconds before the second start in a crash loop; doubles
CAP = 30.0
QUICK = 10.0  # a head that dies within this of adopting the run was in a crash loop
TRIES = 5  # starts in a crash loop before the agent gives up
LOG = "supervisor.log"


def spawn(run_dir: str) -> subprocess.Popen:
    """``mwrun adopt`` for the run in ``run_dir`` (its folder's name is its id), with
    this agent's environment (the launch's: MWRUN_HOME among it)."""
    with open(Path(run_dir) / LOG, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "mwrun", "adopt",
                                 os.path.basename(run_dir)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=run_dir)


class HeadRestart:
    def __init__(self, run_dir: str, start: Callable[[str], subprocess.Popen] = spawn):
        self.run_dir, self.start = run_dir, start
        self.due_at: float | None = None  # when the next head starts (None: none is due)
        self.loop = 0  # starts so far in a crash loop
        self.adopted_at: float | None = None  # when the last head adopted the run
        self.child: subprocess.Popen | None = None  # the head started last, until it ends
        self.starts = 0  # heads started in all

    def lost(self, now: float) -> None:
        """The head went: the next one is due, at once or after a backoff."""
        quick = self.adopted_at is not None and now - self.adopted_at < QUICK
        self.loop = self.loop + 1 if quick else 0
        self.adopted_at = None
        self._plan(now)

    def _plan(self, now: float) -> None:
        if self.loop >= TRIES:
            self.due_at = None  # given up: the grace runs out
            return
        self.due_at = now + (0.0 if self.loop == 0 else min(BACKOFF * 2 ** (self.loop - 1),
                                                            CAP))

    def adopted(self, now: float) -> None:
        """A head adopted the run (ours, or one a user started)."""
        self.adopted_at, self.due_at = now, None

    def tick(self, now: float, away: bool) -> None:
        """Start the head that is due; a head started that ended before it adopted the
        run is a crash loop's next turn."""
        if self.child is not None and self.child.poll() is not None:
            self.child = None
            if away and self.adopted_at is None and self.due_at is None:
                self.loop += 1
                self._plan(now)
        if away and self.due_at is not None and now >= self.due_at and self.child is None:
            self.due_at = None
            with contextlib.suppress(OSError):
                self.child = self.start(self.run_dir)
                self.starts += 1
