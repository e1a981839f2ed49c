"""The status document (``mwrun status --json`` and ``state.json``), built from the
supervisor's records and the loop's readings: processes, worlds with their traffic,
hosts. ``state.json`` is rewritten only when something in it changed (a heartbeat
changes nothing) or the usage readings are due, and then behind, at most once per
SAVE_GAP: building the document for every event would cost the supervisor more than
everything else it does.
"""

from __future__ import annotations

import os
import time

from mwrun.head import rundir
from mwrun.schema import STATE, TOPOLOGY, HostState
from mwrun.schema import WorldState as W

USAGE_EVERY = 10.0  # seconds between cpu/memory readings for state.json
USAGE_FRESH = 1.0  # a status request reuses readings younger than this
SAVE_GAP = 0.25  # seconds between two writes of state.json at least


def build(loop, fresh_usage: bool = False) -> dict:
    sup = loop.supervisor
    now = time.monotonic()
    # Fresh for a status request, but read at most once a second: a client asking in a
    # loop must not make the supervisor read /proc for every process each time.
    if (fresh_usage and now - loop.usage_at >= USAGE_FRESH) or \
            now - loop.usage_at >= USAGE_EVERY:
        loop.usage_at = now
        if loop.agents is not None:
            loop.agents.refresh_usage()  # answers arrive for the next document
        loop.usage = {name: loop.handles[name].usage() for name, rec in sup.procs.items()
                      if rec.state.alive and name in loop.handles}
    processes = []
    for name, rec in sup.procs.items():
        cpu, rss = loop.usage.get(name, (None, None)) if rec.state.alive else (None, None)
        processes.append({
            "name": name, "host": rec.plan.host, "pid": rec.pid, "state": rec.state.value,
            "exit_code": rec.exit_code, "restarts": rec.restarts,
            "worlds": dict(rec.plan.worlds),
            "gpus": [int(g) if g.isdigit() else g for g in rec.plan.gpus],
            "cpus": list(rec.plan.cpus) if rec.plan.cpus is not None else [],
            "started_at": rec.started_at, "cpu_percent": cpu, "rss_bytes": rss,
            "start": loop.starts.get(name),
            "last_event": rec.why or None,
            "traffic": loop.traffic.per_member(name, rec.pid, rec.plan.worlds, now)})
    worlds = [{"name": name, "backend": w.plan.backend, "size": w.plan.size,
               "members": list(w.plan.members), "generation": w.generation,
               "state": W.UNKNOWN.value if w.opaque and w.state is W.FORMING
               else w.state.value, "breaks": w.breaks, "port": w.plan.port,
               "reason": w.reason or w.opaque,
               **loop.traffic.view(_pids(loop, w), name, now),
               "healthy_for_s": round(now - w.healthy_since, 3)
               if w.state is W.HEALTHY and w.healthy_since is not None else None}
              for name, w in sup.worlds.items()]
    return {"run_id": loop.run_id, "name": loop.plan.name, "state": sup.state.value,
            "supervisor_pid": os.getpid(), "started_at": loop.started_at,
            "topology": str(loop.run_dir / TOPOLOGY), "control": loop.control_path,
            "exit_code": sup.exit_code if sup.finished else None,
            "processes": processes, "worlds": worlds, "hosts": _hosts(loop)}


def _hosts(loop) -> list[dict]:
    states = loop.agents.states() if loop.agents is not None else {}
    pids = loop.agents.pids() if loop.agents is not None else {}
    return [{"name": name, "addr": addr, "state": states.get(name, HostState.LOCAL.value),
             "agent_pid": pids.get(name)} for name, addr in loop.hosts]


def rates(loop, now: float, span: float) -> dict:
    """Per world [calls/s, bytes/s] for the history (rounded: it is for pictures)."""
    found = {}
    for name, world in loop.supervisor.worlds.items():
        view = loop.traffic.view(_pids(loop, world), name, now, span)
        if view["calls_per_s"] is not None:
            found[name] = [round(view["calls_per_s"], 2), round(view["bytes_per_s"])]
    return found


def _pids(loop, world) -> dict:
    procs = loop.supervisor.procs
    return {m: procs[m].pid for m in world.plan.members if procs[m].state.alive}


def save(loop, force: bool = False) -> None:
    """Write state.json (and the history) if something in it changed, or the usage
    readings are due. Called after every event, so the common case (a heartbeat that
    changed nothing) must cost next to nothing. The history is written at once (its
    times are the events'); state.json is written behind, at most once per SAVE_GAP:
    a burst of events (a launch, a host lost) costs one write, not one per event.
    ``loop.save_due`` tells the loop when a deferred write is due."""
    hosts = tuple(sorted(loop.agents.states().items())) if loop.agents else ()
    key = (loop.supervisor.signature(), loop.usage_at, hosts)
    now = time.monotonic()
    if key == loop.saved and now - loop.usage_at < USAGE_EVERY:
        return
    if key[0] != loop.observed:
        loop.history.observe(loop.supervisor)
        loop.observed = key[0]
    if not force and now - loop.saved_at < SAVE_GAP:
        loop.save_due = loop.saved_at + SAVE_GAP
        return
    doc = build(loop)
    rundir.write_json(loop.run_dir / STATE, doc)
    loop.saved = (key[0], loop.usage_at, hosts)  # build() may have read usage afresh
    loop.saved_at, loop.save_due = time.monotonic(), None
