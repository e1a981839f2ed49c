"""The text of ``mwrun report`` under its picture (and printed): per world its breaks,
downtime and pace, each fault phase by phase with what it cost, the post-mortem
bundles and the scale operations the history recorded. A view: the numbers come
from the run's records (mwrun.records), this module only words them."""

from __future__ import annotations

import time

from mwrun.records import Fault, Pace, Timeline, impact, pace, recorded
from mwrun.schema import Event as E
from mwrun.schema import Phase, ScalePhase
from mwrun.terminal import size

MANY = 4  # faults in a run past which the summary gives each one line (a drill's)


def summary(tl: Timeline, live: bool | None = None) -> list[str]:
    """The text under the picture: per world, its breaks, downtime, and pace. ``live``:
    whether the run's head still runs (None: not known), for a history with no end."""
    took = tl.last - tl.start
    state = tl.ended or {True: "live", False: "cut short (its head died without"
                         " ending it)", None: "live, or cut short"}[live]
    counted = tl.tally  # as the launch's finish line counts them (records.Tally)
    lines = [f"run {tl.run_id} ({tl.name}): {took:.1f} s of history, {state};"
             f" {len(tl.faults)} fault(s), {counted.restarts} restart(s),"
             f" {counted.breaks} world break(s)"]
    calm = [w for w in tl.worlds if not any(f.world == w for f in tl.faults)]
    for world in tl.worlds:
        mine = [f for f in tl.faults if f.world == world]
        if not mine and len(calm) <= 4:
            kept = pace(tl, world, tl.start, tl.last)
            lines.append(f"{world}: no breaks" + (f"; {_rate(kept)} on average" if kept else ""))
        if not mine:
            continue
        down = sum(f.downtime(tl.last) for f in mine)
        lines.append(f"{world}: {sum(f.breaks for f in mine)} break(s), down {_secs(down)}"
                     " in all")
        for f in mine:  # many faults (a drill): a line each; its summary gives the pace
            lines += ["  " + line for line in (_fault_lines(tl, f) if len(tl.faults) <= MANY
                                              else [_fault_line(tl, f)])]
    if len(calm) > 4:  # many worlds: one line for the unbroken ones
        paces = [p[0] for w in calm if (p := pace(tl, w, tl.start, tl.last))]
        other = " other" if tl.faults else ""
        lines.append(f"{len(calm)}{other} worlds: no breaks" + (
            f"; {min(paces):.1f} to {max(paces):.1f} calls/s on average" if paces else ""))
    return lines + slow_lines(tl) + postmortem_lines(tl) + scale_lines(tl) + \
        [f"note: {n}" for n in tl.notes]


def slow_lines(tl: Timeline) -> list[str]:
    """Each member the head named the slow one of its world (the history's ``slow``
    records), from when until it caught up; the last few when there are many."""
    records = [e for e in tl.events if e["event"] == E.SLOW]
    spans: list[str] = []
    for i, r in enumerate(records):
        if not r.get("member"):
            continue
        until = next((e["t"] for e in records[i + 1:] if e.get("world") == r.get("world")),
                     None)
        spans.append(f"  {r.get('world')}: {r['member']} from {r['t'] - tl.start:.1f} s"
                     f" to {'the end' if until is None else f'{until - tl.start:.1f} s'}"
                     f" (its peers waited {float(r.get('lag_s') or 0) * 1000:.0f} ms more"
                     " per collective)")
    if not spans:
        return []
    head = f"slow members named: {len(spans)}"
    return [head + (f" (the last {MANY} below)" if len(spans) > MANY else ""), *spans[-MANY:]]


def postmortem_lines(tl: Timeline) -> list[str]:
    """Each hang's and break's post-mortem bundle (the history's ``postmortem``
    records): its culprit line and its folder; the last few when there are many."""
    records = [e for e in tl.events if e["event"] == E.POSTMORTEM]
    if not records:
        return []
    lines = [f"post-mortem bundles: {len(records)}"
             + (f" (the last {MANY} below)" if len(records) > MANY else "")]
    for r in records[-MANY:]:
        lines += [f"  {r.get('culprit')}", f"    {r.get('path')}"]
    return lines


def scale_lines(tl: Timeline) -> list[str]:
    """Each replica a scale operation added or retired (the history's ``scale``
    records): one line each for a few, else counts and the median of each kind."""
    records, kinds = recorded(tl)
    lines = []
    for c in kinds:
        verb = "added" if c.kind == "add" else "retired"
        line = f"scale: {len(c.records)} replica(s) {verb}"
        if c.took:
            line += f", requested -> {c.last.value} median {_secs(c.took[len(c.took) // 2])}," \
                    f" max {_secs(c.took[-1])}"
        if c.failed:
            line += "; not done: " + ", ".join(
                f"{r.get('process')} ({r.get('outcome')}: {r.get('error')})" for r in c.failed)
        lines.append(line)
    if len(records) <= MANY:
        for r in records:
            lines.append(f"  {r.get('op')} {r.get('process')} {r.get('change')}: "
                         + scale_text(r["phases"]))
    return lines


def scale_text(phases: dict) -> str:
    """``started +41 ms, formed +97 ms, ...``: each phase after requested."""
    t0 = phases.get(ScalePhase.REQUESTED.value)
    return ", ".join(
        f"{p.value} " + (f"+{_secs(t - t0)}" if isinstance(t := phases.get(p.value),
                                                         int | float)
                         and isinstance(t0, int | float) else "-")
        for p in ScalePhase if p is not ScalePhase.REQUESTED and p.value in phases)


def _fault_line(tl: Timeline, f: Fault) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(f.start)) + f"{f.start % 1:.3f}"[1:]
    what = f"killed ({f.killed})" if f.kill is not None else f"broke ({f.reason})"
    end = f"down {_secs(f.downtime(tl.last))}" if f.back is not None else f.outcome
    return f"{at} {what}: {end}"


def _fault_lines(tl: Timeline, f: Fault) -> list[str]:
    at = time.strftime("%H:%M:%S", time.localtime(f.start)) + f"{f.start % 1:.3f}"[1:]
    if f.broke is None:  # a STOP not yet judged: the world is down all the same
        broke = "not broken yet"
    else:
        broke = "broke" + (f" +{_secs(f.broke - f.start)}" if f.kill is not None else "") \
            + f" ({f.reason})" + (f", {f.breaks} times before it re-formed"
                                  if f.breaks > 1 else "")
    what = f"{at} killed ({f.killed}), {broke}" if f.kill is not None else f"{at} {broke}"
    if f.restart is not None:
        what += f", restarted +{_secs(f.restart - f.start)}"
    end = f"re-formed +{_secs(f.end - f.start)}" if f.end is not None else f.outcome
    out = [f"{what},", f"  {end}: down {_secs(f.downtime(tl.last))}"]
    if f.phases:
        out.append("  phases: " + phase_text(f.phases))
    cost = impact(tl, f)
    out.append(f"  {f.world}: before {_rate(cost.before)}, during {_rate(cost.during)},"
               f" after {_rate(cost.after)}")
    others = [m for m in cost.others if m.kept] + [m for m in cost.others if not m.kept]
    if len(others) <= 3:
        for m in others:
            out.append(f"  meanwhile {m.world}: {_rate(m.before)} before,"
                       f" {_rate(m.during)} during" + (" (kept its pace)" if m.kept else ""))
    elif others:
        kept = sum(1 for m in others if m.kept)
        slowed = [m.world for m in others if not m.kept]
        out.append(f"  meanwhile {kept} other world(s) kept their pace"
                   + (f"; slower: {', '.join(slowed)}" if slowed else ""))
    return out


def phase_text(phases: dict) -> str:
    """``exit_seen +12 ms, survivors_told +15 ms, ...``: each phase after t_fault, by
    the names the status and the history use; a phase that did not happen is '-'."""
    t0 = phases.get(Phase.T_FAULT.value)
    parts = []
    for p in list(Phase)[1:]:
        t = phases.get(p.value)
        if isinstance(t, int | float) and isinstance(t0, int | float):
            parts.append(f"{p.value} +{_secs(t - t0)}")
        else:
            parts.append(f"{p.value} -")
    return ", ".join(parts)


def _rate(rate: Pace | None) -> str:
    if rate is None:
        return "-"
    if rate[1] is None:
        return f"{rate[0]:.1f} calls/s"
    return f"{rate[0]:.1f} calls/s ({size(rate[1])}/s)"


def _secs(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
