"""The environment of a launched process: a pure function of the plan.

A process sees its primary world (the first world listing it) under the names plain
PyTorch reads, so a script written for torchrun runs unchanged, and every world it
belongs to in ``MWRUN_WORLDS`` for the mwrun library.

``TORCHELASTIC_RESTART_COUNT`` is the primary world's *generation*, not the process's
own restart count: torch names a rendezvous attempt by it, so every member of one
generation must agree on it, while ``MWRUN_RESTART_COUNT`` counts this process's
restarts.

A member of nccl worlds also gets torch's NCCL error handling set so that a failed
collective aborts its communicator only, not the process (``gpu_env``).

``LOCAL_RANK`` of a process pinned to GPUs indexes its *own* visible devices, as a
Slurm task bound with ``--gpu-bind`` sees only its GPUs: it is 0, with
``LOCAL_WORLD_SIZE`` 1, so the torchrun line
``torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))`` picks the process's GPU. A
process with no GPU keeps torchrun's meaning: its index among its primary world's
members on its host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from mwrun.launchspec import LaunchSpec
from mwrun.plan import nccl
from mwrun.plan.placement import Plan, ProcessPlan, WorldPlan

# Variables mwrun sets; a copy of the supervisor's own values must never leak through
# (an outer torchrun's TORCHELASTIC_*, a job launched from inside another job). The
# user's settings (MWRUN_HOME, MWRUN_GRACE) do pass, so a job can drive mwrun itself.
OWNED_PREFIXES = ("TORCHELASTIC_",)
OWNED_MWRUN = ("MWRUN_WORLDS", "MWRUN_PROCESS", "MWRUN_RUN_ID", "MWRUN_RESTART_COUNT",
               "MWRUN_INCARNATION",
               "MWRUN_CONTROL", "MWRUN_HOST_ADDR", "MWRUN_HANG_TIMEOUT")
# torch warns "Failed to initialize NumPy" at import wherever numpy is missing (a CPU
# install has none), once in every process. numpy would cost each start about 0.4 s of
# import (measured here: 3.0-3.5 s against 2.8 s), and mwrun needs none of it; the one
# warning is filtered instead, after the user's own filters, which still win.
QUIET_NUMPY = "ignore:Failed to initialize NumPy:UserWarning"
OWNED = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
         "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
         "CUDA_VISIBLE_DEVICES")


def world_spec(world: WorldPlan, rank: int, generation: int) -> dict:
    """One world as its member at ``rank`` is told of it: in MWRUN_WORLDS at its start,
    or, for a world added while it runs, in the head's ``add`` (head/downlink.py)."""
    return {"rank": rank, "size": world.size, "backend": world.backend,
            "addr": world.addr, "port": world.port, "generation": generation,
            "timeout": world.timeout,
            # rejoin()'s default deadline; null: none (plan/timeouts.py)
            "rejoin": world.rejoin}


def worlds_json(plan: Plan, proc: ProcessPlan, generations: Mapping[str, int]) -> str:
    worlds = {name: world_spec(plan.worlds[name], rank, generations.get(name, 0))
              for name, rank in proc.worlds.items() if name in plan.worlds}
    return json.dumps(worlds, separators=(",", ":"))


def mwrun_env(plan: Plan, name: str, *, run_id: str, control: str,
              generations: Mapping[str, int] | None = None, restart_count: int = 0,
              incarnation: int = 1) -> dict:
    """Every variable mwrun gives process ``name`` (without the inherited ones)."""
    generations = generations or {}
    proc = plan.processes[name]
    primary = plan.worlds[proc.primary]
    # Pinned: alone with its devices (see the module's docstring).
    local_rank, local_size = (0, 1) if proc.gpus else (proc.local_rank, proc.local_world_size)
    env = {
        "MASTER_ADDR": primary.addr,
        "MASTER_PORT": str(primary.port),
        "RANK": str(proc.worlds[primary.name]),
        "WORLD_SIZE": str(primary.size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_size),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(proc.worlds[primary.name]),
        "ROLE_WORLD_SIZE": str(primary.size),
        "ROLE_NAME": proc.replica_of or proc.name,
        # Like torchrun's agent: the store exists already; connect as a client.
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": str(generations.get(primary.name, 0)),
        "TORCHELASTIC_MAX_RESTARTS": str(proc.max_restarts),
        "TORCHELASTIC_RUN_ID": run_id,
        "MWRUN_WORLDS": worlds_json(plan, proc, generations),
        "MWRUN_PROCESS": proc.name,
        "MWRUN_RUN_ID": run_id,
        "MWRUN_RESTART_COUNT": str(restart_count),
        # Which start of it this is: a generation admits one incarnation per rank, so
        # a stale copy (its host stalled and was replaced) is refused (protocol.py).
        "MWRUN_INCARNATION": str(incarnation),
        "MWRUN_CONTROL": control,
        "MWRUN_HOST_ADDR": proc.addr,
        # The library beats often enough for this deadline.
        "MWRUN_HANG_TIMEOUT": f"{proc.hang_timeout:g}",
        # Exclusive GPUs: a process that asked for none sees none.
        "CUDA_VISIBLE_DEVICES": ",".join(proc.gpus),
    }
    if "PYTHONUNBUFFERED" not in proc.env:
        # A process killed right after print() must not lose the line to a pipe's
        # block buffer; the topology's env may still say otherwise.
        env["PYTHONUNBUFFERED"] = "1"
    if "PYTHONFAULTHANDLER" not in proc.env:
        # A process killed by a native crash (SIGSEGV, SIGABRT...) writes every thread's
        # Python stack to its log as it dies, so the log and the world's post-mortem
        # bundle say where; the signal still ends it as before.
        env["PYTHONFAULTHANDLER"] = "1"
    if proc.cpus is not None and "OMP_NUM_THREADS" not in proc.env:
        # torch sizes its thread pools by the machine, not the affinity mask.
        env["OMP_NUM_THREADS"] = str(len(proc.cpus))
    env.update(gpu_env(plan, proc))
    return env


def gpu_env(plan: Plan, proc: ProcessPlan) -> dict:
    """A member of nccl worlds: torch aborts only a failed communicator, never the
    process, and its watchdog outwaits the worlds' timeouts (plan/nccl.py says what
    and worlds/nccl.py why). What the topology's ``env`` sets is the user's."""
    timeouts = [plan.worlds[w].timeout for w in proc.worlds if plan.worlds[w].backend == "nccl"]
    if not timeouts:
        return {}
    return nccl.unset(nccl.member_env(max(timeouts)), proc.env)


def launch_spec(plan: Plan, name: str, **kwargs) -> LaunchSpec:
    """How process ``name`` starts, on whichever host runs it (the one builder of its
    environment: its host's hands lay it over that host's own)."""
    proc = plan.processes[name]
    return LaunchSpec(
        name=name, argv=proc.cmd, cwd=proc.cwd,
        env={**proc.env, **mwrun_env(plan, name, **kwargs)},
        unset=OWNED + OWNED_MWRUN, unset_prefixes=OWNED_PREFIXES,
        # Python applies PYTHONWARNINGS entries left to right, the last match winning:
        # ours goes first, so a user's "default" or "error" entry still shows the warning.
        prepend={"PYTHONWARNINGS": QUIET_NUMPY},
        cpus=tuple(sorted(proc.cpus)) if proc.cpus is not None else None,
        netns=proc.netns, preload=proc.preload, warm=proc.warm)


def process_env(plan: Plan, name: str, inherited: Mapping[str, str], **kwargs) -> dict:
    """The full environment: inherited, minus mwrun's own names, plus the user's, plus ours."""
    return launch_spec(plan, name, **kwargs).environ(inherited)
