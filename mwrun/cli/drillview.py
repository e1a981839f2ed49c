"""A drill's record in words: at the drill's end, and in ``mwrun report`` (each drill
the history recorded). A view: the record is records.summarize's."""

from __future__ import annotations

import time

from mwrun.cli.summaryview import phase_text, scale_text
from mwrun.records import problems


def lines(record: dict, brief: bool = False) -> list[str]:
    """The drill's summary in words (``mwrun drill`` at its end, and ``report``);
    ``brief``: a line per world, without each fault's (under a picture)."""
    took = record["ended"] - record["started"]
    sent = sum(w["faults"] for w in record["worlds"].values())
    scale = record.get("scale")
    head = (f"drill: {sent} fault(s) (SIG{record.get('signal', 'KILL')})"
            + (f" and {scale['count']} scale operation(s)" if scale is not None else "")
            + f" in {took:.0f} s" + (" (interrupted)" if record.get("interrupted") else ""))
    out = [head + f"; pace kept: faulted worlds {_pct(record['kept_faulted'])},"
           f" the others during each fault {_pct(record['kept_others'])}"]
    left_out = record.get("pace_left_out") or {}
    for name, w in record["worlds"].items():
        why = f" ({left_out[name]}: no pace kept)" if name in left_out else ""
        if not w["faults"]:
            out.append(f"  {name}: no faults" + (why or f"; kept {_pct(w['kept'])} of its pace"))
            continue
        out.append(f"  {name}: {w['faults']} fault(s), down median {_secs(w['downtime_median'])}"
                   f" max {_secs(w['downtime_max'])}; " + (why.strip(" ()") if why else
                   f"kept {_pct(w['kept'])} of its pace ({_num(w['pace'])} of"
                   f" {_num(w['fault_free_pace'])} calls/s)"))
        for f in [] if brief else w["list"]:
            at = time.strftime("%H:%M:%S", time.localtime(f["sent"]))
            state = f"down {_secs(f['downtime'])}" if f["recovered"] else "NOT RECOVERED"
            state += " (hit again while down: the same outage)" if f.get("again") else ""
            out.append(f"    {at} {f['process']}: {state}"
                       + (f"; {phase_text(f['phases'])}" if f["phases"] else ""))
    if left_out:
        out.append(f"  pace left out for {len(left_out)} world(s) whose membership changed"
                   " during the drill (no fault-free pace of the same world):"
                   f" {', '.join(sorted(left_out))}")
    if scale is not None and scale["done"]:
        out.append("  (a scale operation moves load between the worlds that stay too: their"
                   " pace says as much of the load as of the faults)")
    if scale is not None:
        out += scale_lines(scale, brief)
    heads = record.get("head")
    if heads is not None and heads["kills"]:
        out.append(f"  head: killed {heads['kills']} time(s); a new head had the run"
                   f" {_secs(heads['back_median'])} after the kill (median), max"
                   f" {_secs(heads['back_max'])}")
    outside = record.get("outside")
    if outside is not None:
        out.append(f"  outside the faulted worlds ({outside['worlds']} world(s) the drill did"
                   f" not fault): {count_text(outside['failed_calls'])} failed call(s),"
                   f" {count_text(outside['breaks'])} break(s)")
    out += [f"  skipped: {s}" for s in record["skipped"]]
    out += [f"  {p}" for p in problems(record)]
    return out


def scale_lines(scale: dict, brief: bool) -> list[str]:
    out = [f"  scale: {scale['count']} operation(s), {scale['done']} done,"
           f" {len(scale['failed'])} not done"]
    for kind, verb, last in (("add", "added", "told"), ("remove", "retired", "exited")):
        s = scale[kind]
        if s["count"]:
            out.append(f"    {s['count']} replica(s) {verb}: requested -> {last} median"
                       f" {_secs(s['median'])}, max {_secs(s['max'])}")
    for op in [] if brief else scale["ops"]:
        at = time.strftime("%H:%M:%S", time.localtime(op["asked"]))
        out.append(f"    {at} {op['op']} {op['process']} {op['from']} -> {op['to']}:"
                   f" {op['state']}" + (f" ({op['error']})" if op.get("error") else ""))
        out += [f"      {c['process']} {c['change']}: {scale_text(c['phases'])}"
                for c in op.get("changes") or []]
    out += [f"    skipped: {s}" for s in scale["skipped"]]
    return out


def count_text(value: int | None) -> str:
    return "-" if value is None else str(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def progress(record: dict, done: float, length: float, ops: int, running: int,
             scales: bool) -> tuple[str, str]:
    """The drill's progress line so far (``record``: its summary until now), and what
    it says that may change (a plain line is said again only when that did)."""
    faults = sum(w["faults"] for w in record["worlds"].values())
    downs = [(f["sent"], f["downtime"]) for w in record["worlds"].values()
             for f in w["list"] if f["downtime"] is not None]
    last = _secs(max(downs)[1]) if downs else "-"
    shown = f", {ops} scale op(s) ({running} under way)" if scales else ""
    return (f"drill {done:.0f}/{length:.0f} s: {faults} fault(s){shown},"
            f" last down {last}, pace kept {_pct(record['kept_faulted'])} (faulted)"
            f" {_pct(record['kept_others'])} (others)",
            f"{faults} {last} {ops} {running}")
