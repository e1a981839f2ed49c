"""What an agent tells a new head of this host's processes (``mwrun adopt``).

A head that adopts a running job has the plan from the run folder, but not what
became of it: which start of each process runs now (its pid and incarnation), and
what each one's library has said (its hello, the generation of each world it joined).
The libraries said that once, to the head that died; they are never asked again (a
member must not notice its head changed). So the agent keeps, for each process it
runs, its start and the last thing its library said of each world; an adopting head
gets them as the ``adopted`` part of the agent's hello and the libraries' words
replayed (``replay``), as though they had just been relayed. What a process does later
goes to the new head as it happens, and an exit while the head was away follows
those in the frames kept for it (host/absence.py).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field

from mwrun.launchspec import LaunchSpec
from mwrun.protocol import Verb, WorldReport

SAID = frozenset({Verb.HELLO, Verb.WORLD, Verb.BYE})  # what a head must hear again
# Of a world, what says where a member stands in it. Not ``added`` (a scale's phase,
# said just after ``ready`` of a world the head added) or ``released`` (a drain's):
# kept as a world's last word, they hid its ``ready`` and the new head waited for ever.
STANDING = frozenset({WorldReport.READY, WorldReport.CLOSED, WorldReport.BROKEN})


@dataclass
class Start:
    """One process's current start, as an adopting head needs it."""

    incarnation: int
    restarts: int
    generations: dict[str, int]  # world -> the generation it was started into
    pid: int | None = None  # once spawned
    warm: bool = False
    at: float | None = None  # when it was made, on this host's wall clock
    ended: bool = False  # while the head was away
    said: dict[str, dict] = field(default_factory=dict)  # its library's last words:
    # "hello", "bye", and each world's last event, by "world:NAME"

    def report(self) -> dict:
        return {"pid": self.pid, "incarnation": self.incarnation, "restarts": self.restarts,
                "warm": self.warm, "generations": self.generations, "t": self.at}


class Recall:
    def __init__(self):
        self.starts: dict[str, Start] = {}  # process -> its current start
        self.ending: set[str] = set()  # ended, their exit not yet out to the head

    def started(self, spec: LaunchSpec) -> None:
        """A start asked by the head: its numbers, as its environment gives them."""
        env = spec.env
        generations: dict[str, int] = {}
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            for world, given in json.loads(env.get("MWRUN_WORLDS", "{}")).items():
                generations[str(world)] = int(given.get("generation", 0))
        self.starts[spec.name] = Start(_number(env.get("MWRUN_INCARNATION")),
                                       _number(env.get("MWRUN_RESTART_COUNT")), generations)

    def spawned(self, name: str, pid: int, warm: bool, at: float) -> None:
        start = self.starts.get(name)
        if start is not None:
            start.pid, start.warm, start.at = pid, warm, at

    def ended(self, name: str) -> None:
        """It exited (or could not start). Its exit waits in the frames to the head: a
        new head that takes the link (the old one gone, or handing over) hears it after
        it was told of this start, so the exit is that start's; reported until then."""
        start = self.starts.get(name)
        if start is not None:
            start.ended = True
            self.ending.add(name)

    def told(self) -> None:
        """Every frame queued for the head is out (or a new head was told what runs):
        the starts that ended are the head's to handle now."""
        for name in self.ending:
            start = self.starts.get(name)
            if start is not None and start.ended:
                del self.starts[name]
        self.ending.clear()

    def heard(self, request: dict) -> None:
        """A library's message on its way to the head."""
        verb = request.get("verb")
        start = self.starts.get(str(request.get("process")))
        if start is None or verb not in SAID or start.pid not in (None, request.get("pid")):
            return  # (its pid may come after its hello: a warm start's, from its zygote)
        if verb == Verb.WORLD:
            if request.get("event") not in STANDING:
                return
            start.said[f"world:{request.get('world')}"] = request
            with contextlib.suppress(TypeError, ValueError):
                start.generations[str(request.get("world"))] = int(request["generation"])
        else:
            start.said[str(verb)] = request

    def report(self) -> dict[str, dict]:
        """What runs here now, by process: its pid, incarnation, restarts, generations.
        A start asked and not made yet (a zygote's fork under way) is reported too, its
        pid null: its ``spawned`` (or ``failed``) follows in the frames kept. Left out, a
        new head would start the process again: two copies of one rank."""
        return {name: start.report() for name, start in self.starts.items()}

    def replay(self) -> list[dict]:
        """The libraries' last words, each process's hello first."""
        said = []
        for start in self.starts.values():
            if start.ended:
                continue
            mine = [m for m in start.said.values() if m.get("pid") == start.pid]
            said += sorted(mine, key=lambda m: m.get("verb") != Verb.HELLO)  # (stable)
        return said


def _number(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0
