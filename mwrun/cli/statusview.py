"""The status document as tables (``mwrun status``); no torch, no supervisor imports."""

from __future__ import annotations

import time

from mwrun.terminal import paint, seconds, size, table

STATE_COLOURS = {"running": 32, "healthy": 32, "finished": 32, "exited": 32, "starting": 33,
                 "forming": 33, "restarting": 33, "stopping": 33, "hung": 31, "failed": 31,
                 "broken": 31, "stopped": 35, "closed": 35, "unresponsive": 33}


def render(doc: dict, live: bool, colour: bool = False, now: float | None = None,
           events: list[str] | None = None) -> str:
    """The status tables; ``events``: the run's latest events, oldest first (else each
    process's and world's last word)."""
    now = time.time() if now is None else now

    def state(value: str) -> str:
        return paint(value, STATE_COLOURS.get(value), colour)

    age = seconds(max(now - doc.get("started_at", now), 0))
    head = (f"run {doc['run_id']} ({doc['name']}): {state(doc['state'])}, started {age} ago,"
            f" supervisor pid {doc['supervisor_pid']}")
    if not live and doc["state"] == "starting" and not doc["processes"]:
        head += "\n  it ended before it started any process (interrupted, or it failed)"
    elif not live and doc["state"] not in ("finished", "failed"):
        head += "\n  the supervisor has gone without finishing; this is its last word"
    rows = []
    for p in doc["processes"]:
        alive = p["state"] in ("starting", "running", "unresponsive", "hung")
        uptime = seconds(now - p["started_at"]) if alive and p.get("started_at") else "-"
        cpu = f"{p['cpu_percent']:.1f}" if p.get("cpu_percent") is not None else "-"
        rows.append([p["name"], p["host"], str(p["pid"] or "-"), state(p["state"]),
                     "-" if p["exit_code"] is None else str(p["exit_code"]), str(p["restarts"]),
                     uptime, cpu, size(p.get("rss_bytes")),
                     " ".join(f"{w}:{r}" for w, r in p["worlds"].items())])
    procs = table(["PROCESS", "HOST", "PID", "STATE", "EXIT", "RESTARTS", "UPTIME", "CPU%",
                   "MEMORY", "WORLDS:RANK"], rows)
    worlds = table(["WORLD", "STATE", "GENERATION", "BREAKS", "BACKEND", "PORT", "MEMBERS"],
                   [[w["name"], state(w["state"]), str(w["generation"]), str(w["breaks"]),
                     w["backend"], str(w["port"]), ", ".join(w["members"])]
                    for w in doc["worlds"]])
    notes = [f"  {p['name']}: {p['last_event']}" for p in doc["processes"]
             if p.get("last_event") and p["state"] != "running"]
    notes += [f"  {w['name']}: {w['reason']}" for w in doc["worlds"]
              if w.get("reason") and w["state"] != "healthy"]
    if events is not None:
        notes = [f"  {line}" for line in events]
    out = [head, "", procs, "", worlds]
    if notes:
        out += ["", "last events:", *notes]
    return "\n".join(out)
