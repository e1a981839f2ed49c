"""A post-mortem bundle: what it holds and how it is written (postmortem.py captures
it). Each member as ``stacks.txt`` shows it, its two readings merged (py-spy's threads
from outside, with each thread's world call from its library, matched by thread id;
else the library's own), the culprit line over them (culprit.py), and the files:
``bundle.json``, ``stacks.txt``, ``logs/NAME.log``, ``flight_recorder/NAME.json`` where
torch's Flight Recorder was read (worlds/flight.py); ``fault.json`` once its fault closes.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mwrun import protocol
from mwrun.head.postmortem import culprit
from mwrun.head.postmortem.stacks import Ask
from mwrun.schema import log_name
from mwrun.stacktext import render

LOG_TAIL = 64 * 1024  # bytes read from the end of each member's log
LOG_LINES = 100


@dataclass
class Bundle:
    world: str
    generation: int
    hung: str | None  # the member declared hung (its kill waits), if any
    why: str  # the hang's reason, or the break's
    at: float  # wall clock when declared
    started: float  # monotonic
    ask: Ask
    outside: dict[str, dict | None] = field(default_factory=dict)  # None: under way
    outside_why: dict[str, str] = field(default_factory=dict)  # not captured from outside
    broke: str | None = None  # the break that followed (or came first)
    # A break's members read from outside only if their library has not answered by
    # then (postmortem.OUTSIDE_AFTER): py-spy beside a recovery slows it on a small host.
    later: list[str] = field(default_factory=list)
    written: Path | None = None

    @property
    def name(self) -> str:
        return protocol.group_name(self.world, self.generation)



def member(bundle: Bundle, name: str) -> dict:
    """One member as ``stacks.txt`` shows it: its threads from outside where py-spy
    read them (with each thread's world call from its library, matched by thread
    id), else its library's; and both answers as they came."""
    member = bundle.ask.members[name].fields()
    inside = bundle.ask.members[name].told
    outside = bundle.outside.get(name)
    calls = {t.get("id"): t.get("call") for t in (inside or {}).get("threads", [])}
    reasons = [r for r in (member.get("reason"), bundle.outside_why.get(name)) if r]
    if inside is None and not member.get("reason"):
        reasons.insert(0, "its library did not answer (its thread could not run: the"
                          " process stopped, or a thread holding the GIL)")
    if outside is not None and outside.get("error"):
        reasons.append(outside["error"])
    elif outside is None and name in bundle.outside:
        reasons.append("py-spy's reading did not come in time")
    shown = {**member, "by": "library" if inside is not None else None,
             "inside": inside, "outside": outside, "reasons": reasons}
    if outside is not None and outside.get("threads"):
        shown.update(answered=True, by=outside.get("by"), error=None,
                     threads=[{**t, "call": calls.get(t["id"])} for t in outside["threads"]])
    if not shown.get("answered"):
        shown["reason"] = "; ".join(reasons) or "nothing could be read"
    return shown

def tail(logs: Path, name: str) -> str:
    try:
        with open(logs / log_name(name), "rb") as log:
            log.seek(max(os.fstat(log.fileno()).st_size - LOG_TAIL, 0))
            text = log.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-LOG_LINES:]) + "\n"


def seen(world: str, group: str, member: dict) -> culprit.Seen:
    """``group``: the world's group in the Flight Recorder (``Bundle.name``)."""
    threads = member.get("threads") or []
    call, for_s = culprit.call_in(threads, world)
    if call is None and member.get("inside") is None:
        call = culprit.call_in_frames(threads)  # from outside only: the frames say it
    seq = culprit.flight_seq((member.get("inside") or {}).get("flight_recorder"), group)
    return culprit.Seen(member["process"], call, for_s, bool(member.get("answered")),
                        None if member.get("answered") else member.get("reason"),
                        str(member.get("state")), seq)


def recorded(folder: Path, members: list[dict]) -> None:
    """Each member's Flight Recorder dump to ``flight_recorder/NAME.json``; in its
    place in the member, that path, or why there is none."""
    for shown in members:
        dump = shown.pop("flight_recorder", None)
        if shown.get("inside"):  # the ask's own answer: copied, never changed
            shown["inside"] = {k: v for k, v in shown["inside"].items()
                               if k != "flight_recorder"}
        if dump is None:
            continue
        if "off" in dump:
            shown["flight_recorder"] = {"off": dump["off"]}
            continue
        (folder / "flight_recorder").mkdir(parents=True, exist_ok=True)
        path = f"flight_recorder/{shown['process']}.json"
        write_json(folder / path, dump)
        shown["flight_recorder"] = {"path": path, "entries": len(dump.get("entries", [])),
                                    "dropped": dump.get("dropped", 0)}


def write_json(path: Path, doc: dict) -> None:
    with contextlib.suppress(OSError):
        path.write_text(json.dumps(doc, indent=1) + "\n")


def write(folder: Path, logs: Path, bundle: Bundle, took: float) -> str:
    """The bundle's files under ``folder``; its culprit line. Raises OSError."""
    members = [member(bundle, name) for name in bundle.ask.members]
    line = culprit.line(bundle.world, bundle.generation,
                        [seen(bundle.world, bundle.name, m) for m in members],
                        bundle.hung, bundle.why)
    recorded(folder, members)
    doc = {"world": bundle.world, "generation": bundle.generation, "hung": bundle.hung,
           "why": bundle.why, "broke": bundle.broke, "declared_at": round(bundle.at, 4),
           "took_s": took, "culprit": line, "members": members}
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    write_json(folder / "bundle.json", doc)
    (folder / "stacks.txt").write_text(f"{line}\n\n{render(members)}")
    for name in bundle.ask.members:
        (folder / "logs" / log_name(name)).write_text(tail(logs, name))
    return line
