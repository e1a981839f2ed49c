"""The one line a post-mortem bundle says of its fault: who, and what the others did
meanwhile, where the evidence says it ("world1 g3: worker-2 never entered all_reduce;
the others waited in it for 31.0s"), else only what is known. Pure: over the members
as a bundle records them (postmortem.py), so every case is tested without a run.

Each member's world call comes from its library (the call it is in, in this world,
and for how long); when its library could not answer (stopped, a thread holding the
GIL) but py-spy read its frames from outside, a frame in mwrun's world methods says
which call it was in (not for how long). Where torch's Flight Recorder was read
(worlds/flight.py), the call the others wait in gets its number in the world's group
("all_reduce #812"), the number every member's dump can be matched on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mwrun.schema import ProcessState as P

# A frame of these, in mwrun/worlds/, names the call a thread is in (read from outside).
CALL_FRAMES = {"world.py": ("send", "recv", "isend", "irecv", "broadcast", "all_reduce",
                            "reduce", "all_gather", "gather", "scatter", "barrier", "rejoin"),
               "work.py": ("wait",)}


@dataclass
class Seen:
    """One member as the bundle found it."""

    process: str
    call: str | None = None  # the call it was in, in this world (None: in none)
    for_s: float | None = None  # for how long (None: not known)
    known: bool = True  # its stacks were read (from inside or outside)
    why_unknown: str | None = None
    state: str = P.RUNNING.value  # its process state when captured
    seq: int | None = None  # the Flight Recorder's number of the call it is in


def flight_seq(recorder: object, group: str) -> int | None:
    """The number of the newest call of ``group`` (``WORLD-gGEN``) a member's Flight
    Recorder holds as not finished; None where it holds none (or was not read)."""
    if not isinstance(recorder, dict) or not isinstance(recorder.get("entries"), list):
        return None
    for entry in reversed(recorder["entries"]):
        if not isinstance(entry, dict) or entry.get("retired") or \
                entry.get("state") == "completed":
            continue
        names = entry.get("process_group") or [None]
        if isinstance(names, list) and names and names[0] == group:
            seq = entry.get("p2p_seq_id" if entry.get("is_p2p") else "collective_seq_id")
            return seq if isinstance(seq, int) else None
    return None


def call_in(threads: list[dict], world: str) -> tuple[str | None, float | None]:
    """The call of ``world`` a member's library says a thread of it is in."""
    for thread in threads:
        call = thread.get("call")
        if isinstance(call, dict) and call.get("world") == world:
            return call.get("call"), call.get("for_s")
    return None, None


def call_in_frames(threads: list[dict]) -> str | None:
    """The world call a thread's frames are inside (read from outside, which cannot
    tell which world's)."""
    for thread in threads:
        for frame in reversed(thread.get("stack") or []):
            if not isinstance(frame, list) or len(frame) < 3:
                continue
            path, function = str(frame[0]), str(frame[2]).rsplit(".", 1)[-1]
            for module, calls in CALL_FRAMES.items():
                if path.endswith(f"mwrun/worlds/{module}") and function in calls:
                    return function
    return None


def line(world: str, generation: int, members: list[Seen], hung: str | None,
         why: str) -> str:
    """The culprit line. ``members``: in rank order (a break's reason names a rank);
    ``hung``: the member declared hung, if one was; ``why``: the hang's reason, or the
    break's."""
    head = f"{world} g{generation}:"
    others = [m for m in members if m.process != hung]
    waiting = [m for m in others if m.call is not None]
    calls = sorted({m.call for m in waiting if m.call})
    numbers = {m.seq for m in waiting if m.seq is not None}
    number = f" #{next(iter(numbers))}" if len(numbers) == 1 else ""
    longest = max((m.for_s for m in waiting if m.for_s is not None), default=None)
    waited = "" if longest is None else f" for {longest:.1f}s"
    if hung is None:
        return _broke(head, members, why)
    culprit = next((m for m in members if m.process == hung), Seen(hung, known=False))
    if calls == ["rejoin"] and culprit.call != "rejoin":
        # Declared hung after its world broke (a world's timeout is below hang_timeout):
        # the others wait for it to re-form the world, and the break's bundle, one
        # generation back, holds the calls that show what broke it.
        before = f"; g{generation - 1}'s bundle says what broke the world" \
            if generation > 0 else ""
        return (f"{head} {hung} never came back to re-form the world; the others waited"
                f" for it in rejoin{waited} ({why}){before}")
    if len(calls) == 1:
        c = calls[0]
        named = c + number
        if culprit.known and culprit.call is None:
            return (f"{head} {hung} never entered {named}; the others waited in it"
                    f"{waited} ({why})")
        behind = culprit.seq is not None and number and culprit.seq not in numbers
        if culprit.call is not None and (culprit.call != c or behind):
            mine = culprit.call + (f" #{culprit.seq}" if behind else "")
            return (f"{head} {hung} was in {mine} while the others waited in"
                    f" {named}{waited} ({why})")
        if culprit.call == c:
            return (f"{head} {hung} hung inside {named} with the others, who waited in it"
                    f"{waited} ({why})")
        return (f"{head} {hung} hung ({why}); its stacks could not be read"
                f" ({culprit.why_unknown}); the others waited in {named}{waited}")
    doing = f"; the others were in {', '.join(calls)}" if calls else \
        "; the others were in no call of this world"
    if not culprit.known:
        return f"{head} {hung} hung ({why}); its stacks could not be read" \
               f" ({culprit.why_unknown}){doing}"
    where = f"in {culprit.call}" if culprit.call else "in no call of this world"
    return f"{head} {hung} hung {where} ({why}){doing}"


def _broke(head: str, members: list[Seen], why: str) -> str:
    """A break nobody declared a hang for: a member unresponsive when it broke, or one
    not in the call that timed out (the break's reason names it, failures.noticed)."""
    suspects = [m for m in members if m.state in (P.UNRESPONSIVE.value, P.HUNG.value)]
    if len(suspects) == 1:
        s = suspects[0]
        doing = f" (in {s.call})" if s.call else ""
        return f"{head} {s.process} was {s.state}{doing} when the world broke: {why}"
    timed = re.search(r"rank (\d+): its (\w+) timed out after", why)
    # The rank whose call timed out was in it, whatever the capture, made after the
    # break was told, finds it doing (back in the user's code, between calls).
    noticer = members[int(timed.group(1))].process \
        if timed and int(timed.group(1)) < len(members) else None
    idle = [m.process for m in members
            if m.known and m.call is None and m.process != noticer]
    calls = sorted({m.call for m in members if m.call and m.call != "rejoin"})
    if idle and len(idle) < len(members):
        call = timed.group(2) if timed else calls[0] if len(calls) == 1 else None
        if call is not None:
            return f"{head} {_names(idle)} never entered {call}; then it broke: {why}"
    where = f"; the survivors were in {', '.join(calls)}" if calls else ""
    return f"{head} broke: {why}{where}"


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
