"""The plan as people and machines read it (``mwrun launch --dry-run [--json]``)."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict

from mwrun.plan.placement import Plan, format_cpus
from mwrun.terminal import count, seconds, table


def restart_text(proc) -> str:
    if proc.restart == "never":
        return "never"
    return f"{proc.restart} (max {proc.max_restarts}, backoff {seconds(proc.restart_backoff)})"


def start_text(proc) -> str:
    """warm (forked from a zygote that imported PRELOAD) or cold (and why)."""
    return f"warm ({','.join(proc.preload)})" if proc.preload else proc.start


def plan_text(plan: Plan, envs: dict[str, dict[str, str]]) -> str:
    procs = plan.processes.values()
    worlds = plan.worlds.values()
    store = ", ".join(sorted({w.addr for w in worlds}))  # loopback for worlds kept local
    out = [f"Plan of '{plan.name}' ({plan.source}): {count(len(procs), 'process', 'processes')},"
           f" {count(len(worlds), 'world')}; stores on {plan.store_host} ({store})", ""]
    out.append(table(
        ["PROCESS", "HOST", "GPUS", "CPUS", "WORLDS:RANK", "RESTART", "START"],
        [[p.name, p.host, ",".join(p.gpus) or "-",
          format_cpus(p.cpus) if p.cpus is not None else "-",
          " ".join(f"{w}:{r}" for w, r in p.worlds.items()), restart_text(p),
          start_text(p)] for p in procs]))
    out.append("")
    out.append(table(
        ["WORLD", "BACKEND", "SIZE", "ADDR:PORT", "TIMEOUT", "ON FAILURE", "MEMBERS (rank order)"],
        [[w.name, w.backend, str(w.size),
          f"{w.addr}:{w.port}" + (" (free port)" if w.port_auto else ""),
          seconds(w.timeout), w.on_failure, ", ".join(w.members)] for w in worlds]))
    for p in procs:
        out += ["", f"{p.name}:", f"  cmd: {shlex.join(p.cmd)}", f"  cwd: {p.cwd}"]
        if p.netns:
            out.append(f"  netns: {p.netns}")
        out.append("  env:")
        out += [f"    {k}={v}" for k, v in sorted(envs[p.name].items())]
    return "\n".join(out)


def plan_json(plan: Plan, envs: dict[str, dict[str, str]]) -> str:
    data = asdict(plan)
    for name, proc in data["processes"].items():
        proc["cpus"] = list(proc["cpus"]) if proc["cpus"] is not None else None
        proc["environment"] = envs[name]
    return json.dumps(data, indent=2)
