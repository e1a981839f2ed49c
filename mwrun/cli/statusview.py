"""The status document as tables (``mwrun status``); no torch, no head: only
``mwrun.schema``'s names."""

from __future__ import annotations

import time

from mwrun.schema import FINAL, HeadState, Phase, Start
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W
from mwrun.terminal import paint, seconds, size, table

_GREEN, _YELLOW, _RED, _MAGENTA = 32, 33, 31, 35
STATE_COLOURS = {
    **dict.fromkeys((P.RUNNING, W.HEALTHY, R.FINISHED, P.EXITED), _GREEN),
    **dict.fromkeys((P.STARTING, W.FORMING, P.RESTARTING, R.STOPPING, P.UNRESPONSIVE,
                     P.DRAINING, W.DRAINING), _YELLOW),
    **dict.fromkeys((P.HUNG, P.FAILED, W.BROKEN, R.LOST), _RED), HeadState.AWAY: _RED,
    **dict.fromkeys((P.STOPPED, W.CLOSED, W.UNKNOWN), _MAGENTA),
}
_ALIVE = tuple(s.value for s in P if s.alive)


def traffic_cells(w: dict, live: bool) -> list[str]:
    """CALLS/S, MB/S, LAST CALL, HEALTHY FOR of a world: '-' where nothing is known
    (no member beat yet, a plain script's world, a finished run's last word)."""
    if not live or w.get("calls_per_s") is None:
        calls = rate = last = "-"
    else:
        calls = f"{w['calls_per_s']:.1f}"
        mb = w["bytes_per_s"] / 1e6
        rate = "0" if mb == 0 else "<0.01" if mb < 0.01 else f"{mb:.2f}"
        age = w.get("last_call_age_s")
        last = "never" if age is None else f"{age * 1000:.0f}ms ago" if age < 1 \
            else f"{seconds(age)} ago"
    up = w.get("healthy_for_s")
    return [calls, rate, last, "-" if up is None or not live else seconds(up)]


def fault_line(w: dict) -> str | None:
    """A world's last fault, phase by phase after its first known one (schema.Phase's
    names, as in history.jsonl and the report): None if it never had one."""
    fault = w.get("last_fault")
    if not fault:
        return None
    phases = fault.get("phases") or {}
    who = ", ".join(str(x) for x in (fault.get("process"), fault.get("signal")) if x)
    steps = []
    for phase in Phase:
        offset = phases.get(phase.value)
        if phase is Phase.T_FAULT and offset == 0:
            continue  # what the others count from
        steps.append(f"{phase.value} " + ("-" if offset is None else _offset(offset)))
    state = " (open)" if fault.get("open") else ""
    return f"  {w['name']} generation {fault.get('generation')}" + \
        (f" ({who})" if who else "") + f"{state}: " + ", ".join(steps)


def postmortem_lines(doc: dict) -> list[str]:
    """Per world its last post-mortem bundle: the culprit line and where it is."""
    found = []
    for w in doc["worlds"]:
        bundle = w.get("postmortem")
        if bundle:
            found += [f"  {bundle.get('culprit')}", f"    bundle: {bundle.get('path')}"]
    return found


def _offset(value: float) -> str:
    return f"+{value * 1000:.0f} ms" if value < 1 else f"+{value:.2f} s"


def scale_lines(doc: dict) -> list[str]:
    """Per scaled process: desired, current (running, not draining), min-max, and the
    replicas draining; the plan's revision."""
    found = []
    for process, entry in (doc.get("scale") or {}).items():
        draining = entry.get("draining") or []
        found.append(f"  {process}: {entry['desired']} desired, {entry['current']}"
                     f" running (scale {entry['min']}-{entry['max']})"
                     + (f"; draining: {', '.join(draining)}" if draining else ""))
    if found and doc.get("revision"):
        found.append(f"  plan revision {doc['revision']} (mwrun scale, mwrun drain)")
    return found


def _world_state(w: dict) -> str:
    left = w.get("drain_left_s")
    return w["state"] if left is None else f"{w['state']} {seconds(left)}"


def cold_starts(doc: dict, plan: dict | None) -> list[str]:
    """Why the processes that started cold did, one line per reason: the plan's
    ('preload: false', 'python -c', ...) or, planned warm, their zygote's failure."""
    planned = (plan or {}).get("processes", {})
    names: dict[str, list[str]] = {}
    for p in doc["processes"]:
        if p.get("start") == Start.COLD:
            why = planned.get(p["name"], {}).get("why_cold") or \
                "its zygote could not start it; see the run's events"
            names.setdefault(why, []).append(p["name"])
    return [f"started cold ({why}): {', '.join(found)}" for why, found in names.items()]


def render(doc: dict, live: bool, colour: bool = False, now: float | None = None,
           events: list[str] | None = None, plan: dict | None = None) -> str:
    """The status tables; ``events``: the run's latest events, oldest first (else each
    process's and world's last word); ``plan``: the run's plan, which says why a
    process started cold."""
    now = time.time() if now is None else now

    def state(value: str) -> str:
        return paint(value, STATE_COLOURS.get(value), colour)

    age = seconds(max(now - doc.get("started_at", now), 0))
    head = (f"run {doc['run_id']} ({doc['name']}): {state(doc['state'])}, started {age} ago,"
            f" supervisor pid {doc['supervisor_pid']}")
    if not doc["processes"] and (doc["state"] == R.FAILED or
                                 (not live and doc["state"] == R.STARTING)):
        head += "\n  it ended before it started any process (interrupted, or it failed)"
    elif doc["state"] == R.LOST:
        left = [p["name"] for p in doc["processes"] if p.get("left_behind")]
        head += (f"\n  {doc.get('lost') or 'its head is gone without ending the run'}; this"
                 " is what is left of it" + (f"\n  still running on this machine, unsupervised:"
                                              f" {', '.join(left)} (mwrun stop"
                                              f" {doc['run_id']} ends them)" if left else ""))
    elif (doc.get("head") or {}).get("state") == HeadState.AWAY:
        away = doc["head"]
        remaining = max((away.get("grace_s") or 0) - (now - away["since"]), 0)
        head += (f"\n  head: {state(HeadState.AWAY.value)} for {seconds(now - away['since'])}"
                 f" ({away.get('why')}); its agents keep every process and world going,"
                 f" as the head last saw them below; without a new head (mwrun adopt"
                 f" {doc['run_id']}) everything stops in {seconds(remaining)} (head_grace)")
    elif (doc.get("head") or {}).get("state") == HeadState.ADOPTING:
        head += (f"\n  head: a new head (pid {doc.get('supervisor_pid')}, epoch"
                 f" {doc['head'].get('epoch')}) is taking the run back"
                 f" ({seconds(now - doc['head']['since'])} so far); below, the last head's"
                 " last word")
    elif not live and doc["state"] not in FINAL:
        head += "\n  the supervisor has gone without finishing; this is its last word"
    rows = []
    for p in doc["processes"]:
        alive = p["state"] in _ALIVE
        uptime = seconds(now - p["started_at"]) if alive and p.get("started_at") else "-"
        cpu = f"{p['cpu_percent']:.1f}" if p.get("cpu_percent") is not None else "-"
        rows.append([p["name"], p["host"], str(p["pid"] or "-"), state(p["state"]),
                     "-" if p["exit_code"] is None else str(p["exit_code"]), str(p["restarts"]),
                     uptime, cpu, size(p.get("rss_bytes")),
                     " ".join(f"{w}:{r}" for w, r in p["worlds"].items())])
    headers = ["PROCESS", "HOST", "PID", "STATE", "EXIT", "RESTARTS", "UPTIME", "CPU%",
               "MEMORY", "WORLDS:RANK"]
    if any(p.get("nccl") for p in doc["processes"]):  # a GPU job: which NCCL each runs
        headers.append("NCCL")
        for row, p in zip(rows, doc["processes"], strict=True):
            row.append(p.get("nccl") or "-")
    procs = table(headers, rows)
    worlds = table(["WORLD", "STATE", "GENERATION", "BREAKS", "CALLS/S", "MB/S", "LAST CALL",
                    "HEALTHY FOR", "BACKEND", "PORT", "MEMBERS"],
                   [[w["name"], paint(_world_state(w), STATE_COLOURS.get(w["state"]),
                                      colour), str(w["generation"]),
                     str(w["breaks"]),
                     *traffic_cells(w, live), w["backend"], str(w["port"]),
                     ", ".join(w["members"])]
                    for w in doc["worlds"]])
    notes = [f"  {p['name']}: {p['last_event']}" for p in doc["processes"]
             if p.get("last_event") and p["state"] != P.RUNNING]
    notes += [f"  {w['name']}: {w['reason']}" for w in doc["worlds"]
              if w.get("reason") and w["state"] != W.HEALTHY]
    if events is not None:
        notes = [f"  {line}" for line in events]
    out = [head, "", procs, "", worlds]
    faults = [line for w in doc["worlds"] if (line := fault_line(w)) is not None]
    if faults:
        out += ["", "last fault per world (each phase after the first known):", *faults]
    slow = [f"  {w['name']}: {w['slow']['member']} (its peers wait"
            f" {w['slow']['lag_s'] * 1000:.0f} ms more per call, over"
            f" {w['slow']['calls']} calls)" for w in doc["worlds"] if w.get("slow")]
    if slow:
        out += ["", "slow members (the member each world waits for):", *slow]
    why = postmortem_lines(doc)
    if why:
        out += ["", "why (the last post-mortem per world; mwrun report lists them all):", *why]
    scaled = scale_lines(doc)
    if scaled:
        out += ["", "scaled processes:", *scaled]
    cold = cold_starts(doc, plan)
    if cold:
        out += ["", *cold]
    if notes:
        out += ["", "last events:", *notes]
    return "\n".join(out)


def in_place(text: str, first: bool) -> str:
    """A --watch frame for a terminal: drawn over the last one (home, each line cleared
    to its end, the rest of the screen cleared), so it updates without flicker."""
    lines = text.split("\n")
    return ("\033[2J" if first else "") + "\033[H" + "\033[K\n".join(lines) + "\033[K\n\033[J"
