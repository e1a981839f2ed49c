"""The loop's warm-start hands: its zygotes, watched in its selector, known to its
watchdog, and what it tells the user while they come up (host/warm.py does the rest).
"""

from __future__ import annotations

import contextlib
import selectors
import sys

from mwrun.host import warm
from mwrun.host.process import ProcessHandle
from mwrun.plan import preload


class WarmStarts:
    def __init__(self, log_path, selector, say, tell_watchdog, stopping):
        self.selector, self.say = selector, say
        self.tell_watchdog, self.stopping = tell_watchdog, stopping
        # Forked children become the supervisor's own to wait for (warm.py says why);
        # where that cannot be, every process starts cold.
        self.can_fork = warm.become_subreaper()
        self.zygotes = warm.Zygotes(sys.executable, log_path, say, self._started, self._closed)

    def prepare_all(self, plan, env_of) -> None:
        """Start every zygote the job needs at once, so their imports run side by side."""
        for name, proc in plan.processes.items():
            if proc.preload and self.can_fork:
                self.zygotes.prepare(proc.preload, env_of(name, dict.fromkeys(proc.worlds, 0), 0))

    def spawn(self, proc, env: dict) -> ProcessHandle | None:
        """A process forked warm, or None: start it the ordinary way."""
        if not (proc.preload and self.can_fork):
            return None
        kind, target, args = preload.target(proc.cmd, proc.cmd[0])
        if not warm.eligible(kind, target, proc.cwd):
            return None
        zygote = self.zygotes.prepare(proc.preload, env)
        if zygote.ready_after is None and zygote.wait_ready():
            self.say(f"zygote ready: {', '.join(proc.preload)} imported in"
                     f" {zygote.ready_after:.1f}s; forking warm processes from it")
        return self.zygotes.spawn(proc.cmd, kind, target, args, env, proc.cwd, proc.cpus,
                                  proc.preload)

    def pids(self) -> set[int]:
        return self.zygotes.pids()

    def close(self) -> None:
        self.zygotes.close()

    def _started(self, zygote) -> None:
        self.say(f"zygote (pid {zygote.pid}) importing {', '.join(zygote.modules)};"
                 " python processes will be forked from it")
        self.tell_watchdog(f"+{zygote.pid}")
        self.selector.register(zygote.sock, selectors.EVENT_READ, (self._said, zygote))

    def _closed(self, zygote) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(zygote.sock)
        self.tell_watchdog(f"-{zygote.pid}")

    def _said(self, zygote) -> None:
        """A message nobody asked for: ready, failed, or the end of the zygote."""
        zygote.take(zygote._receive(0.0))
        if zygote.alive:
            return
        if zygote.ready_after is not None and not self.stopping():
            self.say(f"the zygote (pid {zygote.pid}) ended ({zygote.failed});"
                     " processes forked from it are unaffected; starting a new one")
            self.zygotes.revive(zygote)
        else:
            self.selector.unregister(zygote.sock)  # it failed; its processes start cold
