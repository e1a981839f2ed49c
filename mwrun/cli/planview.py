"""The plan as people and machines read it (``mwrun launch --dry-run [--json]``)."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict

from mwrun.plan import timeouts
from mwrun.plan.placement import Plan, format_cpus
from mwrun.schema import Start
from mwrun.terminal import count, seconds, table

CHAIN_TITLE = "Timeouts, in order: call timeout < hang_timeout < peers' rejoin() deadline"
# Under Slurm, hosts without addr take their node's, known only inside the allocation.
SLURM_NOTE = ("Addresses left empty come from the allocation (SLURM_JOB_NODELIST) at"
              " launch.")


def restart_text(proc) -> str:
    if proc.restart == "never":
        return "never"
    return f"{proc.restart} (max {proc.max_restarts}, backoff {seconds(proc.restart_backoff)})"


def start_text(proc) -> str:
    """warm (forked from a zygote that imported PRELOAD) or cold (and why)."""
    if proc.preload:
        return f"{Start.WARM.value} ({','.join(proc.preload)})"
    return f"{Start.COLD.value} ({proc.why_cold})" if proc.why_cold else proc.start.value


def chain_table(chains: dict[str, timeouts.Chain]) -> str:
    """Each process's timeouts in their order, and where each number came from."""
    rows = [[c.process, f"{timeouts.text(c.timeout.seconds)} in {c.timeout_world}"
             f" ({c.timeout.where()})", f"every {timeouts.text(c.beat)}",
             f"{timeouts.text(c.hang.seconds)} ({c.hang.where()})",
             f"{timeouts.text(c.rejoin.seconds)} in {c.rejoin_world} ({c.rejoin.where()})"]
            for c in chains.values()]
    return "\n".join([CHAIN_TITLE, table(
        ["PROCESS", "CALL TIMEOUT (longest)", "HEARTBEAT", "HANG_TIMEOUT",
         "PEERS' REJOIN (shortest)"], rows)])


def plan_text(plan: Plan, envs: dict[str, dict[str, str]],
              chains: dict[str, timeouts.Chain] | None = None) -> str:
    procs = plan.processes.values()
    worlds = plan.worlds.values()
    store = ", ".join(sorted({w.addr for w in worlds}))  # loopback for worlds kept local
    out = [f"Plan of '{plan.name}' ({plan.source}): {count(len(procs), 'process', 'processes')},"
           f" {count(len(worlds), 'world')}; stores on {plan.store_host} ({store})", ""]
    if any(not p.addr for p in procs) or any(not w.addr for w in worlds):
        out[1:1] = [SLURM_NOTE]
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
    if chains:
        out += ["", chain_table(chains)]
    for p in procs:
        out += ["", f"{p.name}:", f"  cmd: {shlex.join(p.cmd)}", f"  cwd: {p.cwd}"]
        if p.netns:
            out.append(f"  netns: {p.netns}")
        out.append("  env:")
        out += [f"    {k}={v}" for k, v in sorted(envs[p.name].items())]
    return "\n".join(out)


def plan_json(plan: Plan, envs: dict[str, dict[str, str]],
              chains: dict[str, timeouts.Chain] | None = None) -> str:
    data = asdict(plan)
    for name, proc in data["processes"].items():
        proc["cpus"] = list(proc["cpus"]) if proc["cpus"] is not None else None
        proc["environment"] = envs[name]
        if chains:
            proc["timeouts"] = _chain_json(chains[name])
    return json.dumps(data, indent=2)


def _chain_json(chain: timeouts.Chain) -> dict:
    def setting(s: timeouts.Setting, **more) -> dict:
        return {"seconds": None if s.seconds == float("inf") else s.seconds,
                "from": s.where(), **more}

    return {"timeout": setting(chain.timeout, world=chain.timeout_world),
            "heartbeat": chain.beat, "hang_timeout": setting(chain.hang),
            "rejoin": setting(chain.rejoin, world=chain.rejoin_world)}
