"""The slow member told as it changes, so that a leader can route around it: a ``slow``
order down to every member of the world (the library posts it to ``job.events()``) and
a ``slow`` record in the history (``mwrun report``).

Each second the status document's verdict for every world (slowness.py, over the
members' waits of the last WAIT_WINDOW seconds) is compared with what was told last. A
member named, or another member named, is told at once; that no member is waited for
any more is told once the world has had none for CLEAR_AFTER seconds, so a verdict that
wavers at the rule's edge is not told as a stream of changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from mwrun.protocol import Verb
from mwrun.schema import Event

CLEAR_AFTER = 5.0  # seconds a world had no slow member before that is told


class SlowWatch:
    """``verdicts(now)``: per world (generation, the document's ``slow`` or None);
    ``members[world]``: its member processes; ``tell(process, message)``: down its
    link; ``record(dict)``: into the history."""

    def __init__(self, verdicts: Callable[[float], Mapping[str, tuple[int, dict | None]]],
                 members: Mapping[str, Iterable[str]],
                 tell: Callable[[str, dict], None], record: Callable[[dict], None]):
        self.verdicts, self.members, self.tell, self.record = verdicts, members, tell, record
        self.told: dict[str, str | None] = {}  # world -> the member told last (None: none)
        self._clear_since: dict[str, float] = {}  # world -> since when none is named

    def check(self, now: float) -> None:
        found = self.verdicts(now)
        for world in [w for w in self.told if w not in found]:  # removed: forgotten
            del self.told[world]
            self._clear_since.pop(world, None)
        for world, (generation, slow) in found.items():
            told = self.told.get(world)
            if slow is not None:
                self._clear_since.pop(world, None)
                if slow["member"] != told:
                    self._say(world, generation, slow)
            elif told is not None:
                since = self._clear_since.setdefault(world, now)
                if now - since >= CLEAR_AFTER:
                    del self._clear_since[world]
                    self._say(world, generation, None)

    def _say(self, world: str, generation: int, slow: dict | None) -> None:
        self.told[world] = None if slow is None else slow["member"]
        figures = {} if slow is None else {"lag_s": slow["lag_s"], "calls": slow["calls"]}
        message = {"verb": Verb.SLOW.value, "world": world, "generation": generation,
                   "member": self.told[world], **figures}
        for process in self.members.get(world, ()):
            self.tell(process, message)
        # (``collectives``, not ``calls``: a history record's ``calls`` is a count sample)
        self.record({"event": Event.SLOW.value, "world": world, "generation": generation,
                     "member": self.told[world],
                     **({"lag_s": slow["lag_s"], "collectives": slow["calls"],
                         "waits_s": slow["waits_s"]} if slow is not None else {})})
