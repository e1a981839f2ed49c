"""A member's exit, told to its worlds by its agent while the head is away.

The head breaks an exited member's worlds in their stores, and every survivor hears it
at once. Headless (host/absence.py) nobody would: a survivor in a collective with it
sees an error there, but one that waits on it (a leader for a reply, an NCCL call)
would wait until its world's timeout. So an agent knows, for each process it started,
its worlds: where each world's store is and its size (``MWRUN_WORLDS``, or a world
the head added later) and which generation the member last joined (its library's
``ready``, relayed); when the process exits with the head away, it starts a
``breaker`` per world (keeper/breaker.py), forked from that process's own zygote. A new
head finds the generations broken with the same reasons it would have written.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from mwrun import protocol
from mwrun.host import helpers
from mwrun.host.hands import Hands
from mwrun.launchspec import LaunchSpec
from mwrun.protocol import Verb, WorldReport

BREAKER = "mwrun.keeper.breaker"  # run by name: the agent never imports torch


@dataclass
class Seat:
    """One world of a process, as far as breaking it goes."""

    addr: str
    port: int
    size: int
    generation: int


# start(argv, how, preload, env): a breaker started (forked from the zygote of ``preload``
# for that environment, else cold)
Start = Callable[[list[str], tuple, tuple[str, ...], dict], None]


class Breaks:
    def __init__(self, start: Start, environ: Callable[[LaunchSpec], dict],
                 end: Callable[[], None] = lambda: None):
        self.start, self.environ = start, environ
        self.end = end  # the breakers still running ended (their agent ends)
        self.seats: dict[str, dict[str, Seat]] = {}  # process -> world -> seat
        self.zygotes: dict[str, tuple[tuple[str, ...], dict]] = {}  # process -> (preload, env)

    def spawned(self, spec: LaunchSpec) -> None:
        """A start of process ``spec.name``: its worlds as it was told of them."""
        seats = {}
        try:
            for world, given in json.loads(spec.env.get("MWRUN_WORLDS", "{}")).items():
                seats[str(world)] = _seat(given)
        except (TypeError, ValueError, KeyError, AttributeError):
            seats = {}  # not mwrun's library (a plain torchrun script): nothing to break
        self.seats[spec.name] = seats
        self.zygotes[spec.name] = (spec.preload, self.environ(spec))

    def heard(self, request: dict) -> None:
        """A library's message on its way to the head: a generation it joined."""
        if request.get("verb") != Verb.WORLD or request.get("event") != WorldReport.READY:
            return
        seat = self.seats.get(str(request.get("process")), {}).get(str(request.get("world")))
        if seat is not None and isinstance(request.get("generation"), int):
            seat.generation = max(seat.generation, request["generation"])

    def told(self, process: str, message: dict) -> None:
        """A line from the head down to a process: a world added to it."""
        if message.get("verb") == Verb.ADD and process in self.seats:
            with contextlib.suppress(TypeError, ValueError, KeyError, AttributeError):
                # (a line the library refuses as well)
                self.seats[process][str(message["world"])] = _seat(message["spec"])

    def exited(self, name: str, code: int) -> int:
        """Process ``name`` exited while the head is away: each of its worlds broken in
        its store; how many breakers were started."""
        seats = self.seats.pop(name, {})
        preload, env = self.zygotes.pop(name, ((), {}))
        reason = protocol.exit_reason(name, code)
        for seat in seats.values():
            args = (seat.addr, str(seat.port), str(seat.generation), str(seat.size), reason)
            self.start([sys.executable, "-m", BREAKER, *args], ("module", BREAKER, args),
                       preload, env)
        return len(seats)


def on(hands: Hands, log_path: str) -> Breaks:
    """An agent's: its breakers forked from its hands' zygotes, their output to
    ``log_path`` (its zygotes' log), each ended with the agent if still running; nobody
    to tell whether one started."""
    running = helpers.Running()
    return Breaks(lambda argv, how, preload, env: helpers.start(
        hands, argv, how, preload, env, log_path, running.add, lambda why: None),
        lambda spec: spec.environ(os.environ), running.end)


def _seat(given: dict) -> Seat:
    return Seat(str(given["addr"]), int(given["port"]), int(given["size"]),
                int(given.get("generation", 0)))
