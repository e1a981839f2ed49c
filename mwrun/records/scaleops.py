"""Scale operations read back: those the history recorded (its ``scale`` records, one
per replica added or retired), a drill's own (each as the head last answered it), and
the worlds whose membership changed (no fault-free pace of the same world to compare
with). Pure."""

from __future__ import annotations

import time
from dataclasses import dataclass

from mwrun.records import counts as pc
from mwrun.records.timeline import Timeline
from mwrun.schema import Event as E
from mwrun.schema import OpState, ScalePhase

RESHAPED = (E.ADD, E.RESIZE, E.DRAIN, E.REMOVE)  # a world's membership changed
# Per kind of change, the phase that ends it: peers told (added), its exit (retired).
KINDS = (("add", ScalePhase.TOLD), ("remove", ScalePhase.EXITED))


@dataclass(frozen=True)
class Changes:
    """The history's replica changes of one kind: each record, the time from the
    request to ``last`` of those that got there (sorted), and those not done."""

    kind: str  # add | remove
    last: ScalePhase
    records: list[dict]
    took: list[float]
    failed: list[dict]


def recorded(tl: Timeline) -> tuple[list[dict], list[Changes]]:
    """The history's ``scale`` records, and per kind of change what they took."""
    records = [e for e in tl.events if e["event"] == E.SCALE
               and isinstance(e.get("phases"), dict)]
    found = []
    for kind, last in KINDS:
        mine = [r for r in records if r.get("change") == kind]
        if not mine:
            continue
        took = sorted(t - r["phases"][ScalePhase.REQUESTED.value] for r in mine
                      if isinstance(t := r["phases"].get(last.value), int | float)
                      and isinstance(r["phases"].get(ScalePhase.REQUESTED.value), int | float))
        found.append(Changes(kind, last, mine, took,
                             [r for r in mine if r.get("outcome") != "done"]))
    return records, found


def reshaped(tl: Timeline, since: float) -> dict[str, str]:
    """The worlds whose membership changed since ``since`` (a scale operation made,
    resized, drained or removed them): world -> why its pace is left out (no
    fault-free pace of the same world to compare with)."""
    kinds: dict[str, list[str]] = {}
    for e in tl.events:
        if e["event"] in RESHAPED and e["t"] >= since and isinstance(e.get("world"), str):
            kinds.setdefault(e["world"], []).append(e["event"])
    found = {}
    for world, seen in kinds.items():
        before = any(x["event"] in (E.FORM, E.ADD) and x.get("world") == world
                     and x["t"] < since for x in tl.events)
        if not before:
            found[world] = "appeared during the drill"
        elif E.ADD in seen:
            found[world] = "removed and made again during the drill"
        elif E.REMOVE in seen:
            found[world] = "removed during the drill"
        else:
            found[world] = "resized or drained during the drill"
    return found


def settled(ops: list[dict], records: list[dict]) -> list[dict]:
    """A drill's operations, each change's phases completed by the history's ``scale``
    record of it: the head answers an operation done before the new replica's first
    call is known (it comes with a heartbeat), and records it once it is."""
    found = {(r.get("op"), r.get("process")): r["phases"] for r in records
             if isinstance(r.get("phases"), dict)}
    out = []
    for op in ops:
        changes = []
        for change in op.get("changes") or []:
            phases = found.get((op.get("op"), change.get("process")))
            if phases is not None:
                change = {**change, "phases": {**change["phases"], **{
                    p: t for p, t in phases.items() if p in change["phases"]
                    and isinstance(t, int | float) and change["phases"][p] is None}}}
                if change.get("awaits_first_call") and \
                        change["phases"].get(ScalePhase.FIRST_CALL.value) is not None:
                    change["awaits_first_call"] = False
            changes.append(change)
        out.append({**op, "changes": changes})
    return out


def scale_summary(ops: list[dict], skipped: list[str]) -> dict:
    """A drill's scale operations: how many, how they ended, and per replica change
    the time from the request to its peers told (additions) or to its exit (removals),
    from each operation's phases as the head answered them."""
    failed = [op for op in ops if op["state"] != OpState.DONE.value]
    stats = {}
    for kind, last in KINDS:
        took = [c["phases"][last.value] - c["phases"][ScalePhase.REQUESTED.value]
                for op in ops for c in op.get("changes") or [] if c["change"] == kind
                and isinstance(c["phases"].get(last.value), int | float)
                and isinstance(c["phases"].get(ScalePhase.REQUESTED.value), int | float)]
        count = sum(1 for op in ops for c in op.get("changes") or [] if c["change"] == kind)
        stats[kind] = {"count": count, "median": _r(pc.median(took)),
                       "max": _r(max(took, default=None))}
    return {"count": len(ops), "done": len(ops) - len(failed),
            "failed": [_op_named(op) for op in failed], "skipped": list(skipped),
            **stats, "ops": ops}


def _op_named(op: dict) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(op["asked"]))
    text = f"{op['op']} {op['process']}={op['to']} asked at {at}: {op['state']}"
    bad = [c for c in op.get("changes") or [] if c.get("outcome") not in (None, "done")]
    if bad:
        text += "; " + ", ".join(f"{c['process']} {c['change']} {c['outcome']}"
                                 + (f" ({c['error']})" if c.get("error") else "") for c in bad)
    elif op.get("error"):
        text += f" ({op['error']})"
    return text


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
