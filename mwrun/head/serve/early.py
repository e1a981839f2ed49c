"""What a process's library says before its head knows the process's pid.

A warm start's pid comes from its zygote (here, or through a remote host's agent) while
the process already runs: its library's hello, and its ``ready`` for the world it has
joined, can reach the head first. Taken as an earlier start's (``Processes.live``: the
pid is not the record's) and dropped, they left the process starting and its world
forming for good while the world itself worked: no later message says ``ready`` again.
The ssh bundle bench met it about once in 250 restarts of a member on an ssh host.

So they are held, per process, while its start waits for its pid, and handed back in
the order they came once the pid is told: those of that start, to be served then; the
rest (an earlier start's, still on its way) dropped.
"""

from __future__ import annotations

from typing import Any

MAX_HELD = 256  # per process: a start's first seconds (hello, ready, beats, a stacks answer)


class Early:
    def __init__(self) -> None:
        self.held: dict[str, list[tuple[dict, Any]]] = {}

    def hold(self, request: dict, connection: Any) -> None:
        """A library message of ``request["process"]``, whose start has no pid yet;
        ``connection``: the way it came (None: relayed by an agent)."""
        kept = self.held.setdefault(request["process"], [])
        if len(kept) < MAX_HELD:
            kept.append((request, connection))

    def take(self, process: str, pid: int) -> list[tuple[dict, Any]]:
        """What ``process``'s start ``pid`` said before its pid was known, in order;
        what another start said is dropped (a start that failed is dropped so, at the
        next start's pid)."""
        return [(request, connection) for request, connection in self.held.pop(process, [])
                if request.get("pid") == pid]
