"""What ``mwrun stacks`` prints: per member its name, pid, host and the world call it is
in (and for how long), then its threads' Python stacks, innermost frame last as in a
traceback; a member that did not answer is named with the reason. Pure functions over
the head's answer (head/stacks.py's ``Ask.fields``), so they are tested without a run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEADLINE = 2.0  # seconds the members have to answer (mwrun stacks on 64 members: <= 2 s)
POLL_FIRST, POLL_CAP = 0.02, 0.2  # seconds between looks at the ask


def split(args: tuple[str, ...], is_run: Callable[[str], bool]) -> tuple[str | None, list[str]]:
    """[RUN] [PROCESS ...]: a first argument that names a run folder is the run."""
    if args and is_run(args[0]):
        return args[0], list(args[1:])
    return None, list(args)


def collect(ask: Callable[[dict], dict], message: dict, deadline: float = DEADLINE,
            clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep) -> dict:
    """Ask, then look again until no member is waiting or ``deadline`` has passed."""
    end, wait = clock() + deadline, POLL_FIRST
    answer = ask(message)
    while answer.get("waiting") and clock() < end:
        sleep(min(wait, max(end - clock(), 0.0)))
        wait = min(wait * 2, POLL_CAP)
        answer = ask({"verb": "stacks_result", "id": answer["id"]})
    return answer


def settled(answer: dict, deadline: float = DEADLINE) -> list[dict]:
    """The members, each with a reason when it told nothing (one still waiting did not
    answer in time: stopped, or a thread holding the GIL keeps its link's from running)."""
    members = []
    for member in answer.get("members", []):
        if not member.get("answered") and not member.get("reason"):
            member = {**member, "reason": f"did not answer within {deadline:g}s: stopped"
                      " (SIGSTOP), or a thread holds the GIL (a loop in C), so its"
                      f" library's link cannot run (it is {member.get('state')})"}
        members.append(member)
    return members
