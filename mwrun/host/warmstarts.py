"""Warm-start hands for a loop (the head's, or an agent's on its host): its zygotes,
watched in its selector, known to its watchdog, and what it tells the user while they
come up (warm.py does the rest). Which command can start warm is the plan's to say
(``plan.preload.target``); this only forks.
"""

from __future__ import annotations

import contextlib
import selectors
import sys

from mwrun.host import warm
from mwrun.host.process import ProcessHandle


class WarmStarts:
    def __init__(self, log_path, selector, say, tell_watchdog, stopping):
        self.selector, self.say = selector, say
        self.tell_watchdog, self.stopping = tell_watchdog, stopping
        self.held: list[tuple] = []  # starts waiting for a zygote's imports, in order
        # Forked children become the supervisor's own to wait for (warm.py says why);
        # where that cannot be, every process starts cold.
        self.can_fork = warm.become_subreaper()
        self.zygotes = warm.Zygotes(sys.executable, log_path, say, self._started, self._closed)

    def prepare(self, modules, env: dict) -> None:
        """Start the zygote a process will need now, so imports run side by side."""
        if modules and self.can_fork:
            self.zygotes.prepare(tuple(modules), env)

    def holds(self, modules, how, env: dict, cwd: str, resume) -> bool:
        """Whether a start must wait for a zygote still importing (or behind a start
        that does: none overtakes another): it is then held, and ``resume()`` starts
        it once the zygote is ready or failed. The loop that asked (the head's or an
        agent's) goes on serving meanwhile: an import may outlast a link's silence
        limit, and a host once was lost for it."""
        if not self.held and not self._importing(modules, how, env, cwd):
            return False
        self.held.append((modules, how, env, cwd, resume))
        return True

    def _importing(self, modules, how, env: dict, cwd: str) -> bool:
        if not (modules and how and self.can_fork and warm.eligible(how[0], how[1], cwd)):
            return False
        zygote = self.zygotes.prepare(tuple(modules), env)
        return zygote.alive and zygote.ready_after is None

    def _answered(self) -> None:
        held, self.held = self.held, []
        for modules, how, env, cwd, resume in held:
            if not self.holds(modules, how, env, cwd, resume):
                resume()

    def spawn(self, cmd, modules, how, env: dict, cwd: str, cpus) -> ProcessHandle | None:
        """A process forked warm, or None: start it the ordinary way. ``how``: the
        plan's ("script", path, args) or ("module", name, args) for ``cmd``, else None."""
        if not (modules and how and self.can_fork):
            return None
        kind, target, args = how
        if not warm.eligible(kind, target, cwd):
            return None
        modules = tuple(modules)
        zygote = self.zygotes.prepare(modules, env)
        if zygote.ready_after is None and zygote.wait_ready():
            self.say(f"zygote ready: {', '.join(modules)} imported in"
                     f" {zygote.ready_after:.1f}s; forking warm processes from it")
        return self.zygotes.spawn(cmd, kind, target, list(args), env, cwd, cpus, modules)

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
        was_importing = zygote.ready_after is None and zygote.failed is None
        zygote.take(zygote._receive(0.0))
        if was_importing and (zygote.ready_after is not None or not zygote.alive):
            self._answered()
        if zygote.alive:
            return
        if zygote.ready_after is not None and not self.stopping():
            self.say(f"the zygote (pid {zygote.pid}) ended ({zygote.failed});"
                     " processes forked from it are unaffected; starting a new one")
            self.zygotes.revive(zygote)
        else:
            self.selector.unregister(zygote.sock)  # it failed; its processes start cold
