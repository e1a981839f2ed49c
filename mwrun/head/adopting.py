"""``mwrun adopt``: a new head takes a run whose head died while its agents keep it
going (``head_grace``), and supervises it from then on as its own.

What the job should be comes from the run folder (its topology, and its plan with
every revision since laid over it: membership/replay.py); what it is comes from the
agents: the new head takes the next epoch (head/epochs.py), proves the run's secret
at each agent's door and the keeper's (host/door.py, keeper/door.py), and hears from
each what runs there (host/recall.py). Then the same loop as a
launch's runs, told what was found (decide/adoption.py) instead of starting it all.
Nothing is started or signalled before every agent and the keeper took this head: a
refusal anywhere leaves the job running as it was (its state.json names this head's
pid while it tries, so that nobody takes the run for lost meanwhile), and says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

from mwrun import runs
from mwrun.errors import RunError
from mwrun.head import epochs
from mwrun.head.decide import adoption
from mwrun.head.decide.adoption import Found
from mwrun.head.hosts import doors, remote, slurm, stores
from mwrun.head.observe import rundir
from mwrun.head.observe.console import Printer
from mwrun.head.observe.opbook import OpBook
from mwrun.host.frames import Kind
from mwrun.membership import replay
from mwrun.plan import inventory, stored, topology
from mwrun.plan.placement import Plan
from mwrun.schema import (
    AGENTS,
    FINAL,
    HEAD_AWAY,
    KEEPER_DOOR,
    KEEPER_LOG,
    KEEPER_SOCK,
    OPS,
    PLAN,
    STATE,
    TOPOLOGY,
    ZYGOTE_LOG,
)
from mwrun.schema import RunState as R
from mwrun.terminal import count, use_colour


def adopt(run_id: str, grace: float, stream=sys.stdout, force: bool = False,
          handover: bool = False) -> int:
    """Adopt run ``run_id`` and supervise it until it ends; its exit status. With
    ``force``, even from a head that lives (stopped, hung): it is stale from then on;
    with ``handover`` (mwrun restart-head), from a head that lives and hands it over."""
    force = force or handover
    run_dir = rundir.run_path(run_id)
    doc = runs.load_state(run_id)
    _adoptable(run_id, doc, force)
    topo = topology.load(str(run_dir / TOPOLOGY))
    reached = _agents(run_dir, topo.hosts)
    topo, reach = _hosts(topo, reached, run_id)
    launched = _launched(run_dir)
    now = replay.revised(launched, runs.revisions_in(run_dir))  # scaled, drained since
    plan = now.plan
    epoch = epochs.take(run_dir, force, epochs.HANDOVER if handover else "adopt")
    # Ours from here on: its agents stop saying the head is away once they are adopted,
    # and a look at the run meanwhile must find its head alive, not the run lost.
    rundir.write_json(run_dir / STATE, runs.adopting(doc, epoch, os.getpid(), time.time()))
    secret = epochs.secret(run_dir)
    links: dict[str, remote.AgentLink] = {}
    try:
        links = _doors(topo, reached, run_id, run_dir, secret, epoch)
        doors.proven(links, secret, epoch)  # (every door at once: srun takes seconds)
        keeper = doors.keeper(runs.socket_path(run_id, KEEPER_DOOR), epoch)
    except BaseException:
        for link in links.values():
            link.abandon()  # (an agent that took us goes headless again at once)
        reach.close(wait=0)
        raise
    keeping = stores.StoreKeeper(plan, {}, run_dir / KEEPER_LOG,
                                 runs.socket_path(run_id, KEEPER_SOCK), None, topo.head_grace,
                                 runs.socket_path(run_id, KEEPER_DOOR), adopted=keeper)
    found = _found(links)
    printer = Printer(list(plan.processes), stream, use_colour(stream), run_dir)
    wanted = {n for n in found if n in plan.processes}  # (retired ones: retired again)
    printer.event(f"run {run_id} adopted (head epoch {epoch}): {len(wanted)} of"
                  f" {count(len(plan.processes), 'process', 'processes')} found running,"
                  f" in {count(len(plan.worlds), 'world')}; mwrun stop {run_id} ends it")
    # An operation the last head left under way ends here, said by name; what it had
    # done is the job as found (a drain's replica still running is retired again).
    for view in OpBook(run_dir / OPS).settle(now.ops[-UNDER_WAY:], wanted, UNDER_WAY_WHY):
        printer.event(f"{view['op']} ({view['request']}) was under way when the head died:"
                      f" {view['state']}, as the new head found the job")
    # A process no plan names (a revision whose line the last head never finished
    # writing) would be nobody's: it is killed, never left running unsupervised.
    for name in sorted(n for n in found if n not in plan.processes and n not in now.retired):
        seen = found.pop(name)
        links[seen.host].send(Kind.SIGNAL, name=name, signal=int(signal.SIGKILL))
        printer.event(f"{name} (pid {seen.pid}) runs, but no revision of this run names it"
                      " (its line in revisions.jsonl was never finished): killed")
    inv = inventory.inventory(topo)
    inv.update(remote.reported_inventory(topo, links, inv))
    from mwrun.head.bringup import handed_over, summary
    from mwrun.head.loop import Loop

    try:
        loop = Loop(plan, run_id, run_dir, keeping, printer, grace,
                    str(rundir.control_path(run_id)), topo, inv, links, reach,
                    [(n, h.addr) for n, h in topo.hosts.items()],
                    float(doc.get("started_at") or time.time()),
                    adoption.taken(now, found, _breaks(doc)), epoch)
        code = handed_over(loop.run, printer, run_id)
        if code is None:
            return 0
        summary(printer, loop.supervisor, loop.tally, run_id, loop.started_at)
    finally:
        printer.close()
    return code


UNDER_WAY = 64  # the newest operations looked at: one under way is among the last few
UNDER_WAY_WHY = "its head died while it was under way; a new head took the job as it was"


def _adoptable(run_id: str, doc: dict, force: bool) -> None:
    """RunError unless the run's head is away and its agents keep it going (or, with
    ``force``, its head lives)."""
    if runs.is_away(doc):
        return
    if doc["state"] == R.LOST:
        raise RunError(f"run {run_id} lost its head and nothing kept it going (its topology"
                       " has no head_grace, or the grace ran out): its processes are gone;"
                       " launch it again")
    if doc["state"] in FINAL:
        raise RunError(f"run {run_id} has ended ({doc['state']}): there is nothing to adopt")
    if runs.supervisor_alive(doc):
        if force:
            return
        raise RunError(f"run {run_id} has a head (pid {doc.get('supervisor_pid')}): only a"
                       " run whose head is gone can be adopted (--force takes it from a"
                       " head that is stopped or hung)")
    raise RunError(f"run {run_id} is {doc['state']}: its head has not started it yet")


def _agents(run_dir, hosts: dict) -> dict[str, dict]:
    """Each host's agent (``hosts``: the topology's) as the last head noted it
    (rundir.agent_entry): its socket, and under Slurm its node and job; RunError for a
    run whose folder does not say where every agent is."""
    try:
        told = json.loads((run_dir / AGENTS).read_text())
        entries = {str(h): dict(e) for h, e in told.items() if isinstance(e.get("control"), str)}
    except (OSError, ValueError, TypeError, AttributeError):
        raise RunError(f"{run_dir / AGENTS} cannot be read: the run was launched by an"
                       " mwrun that could not be adopted") from None
    far = sorted(n for n, spec in hosts.items() if n not in entries or (spec.slurm and not (
        entries[n].get("node") and entries[n].get("jobid"))))
    if far:
        raise RunError(f"{run_dir / AGENTS} does not say where the agents of"
                       f" {', '.join(far)} are: the run was launched by an mwrun that could"
                       " not adopt it there; nothing was touched")
    return entries


def _hosts(topo, reached: dict[str, dict], run_id: str):
    """(the topology as its last head had it, how a host lost from now on is reached
    again): under Slurm, its hosts on the same nodes (and their addresses), new sruns
    in the same job; else ssh, or this machine, as at launch."""
    if topo.launcher != "slurm":
        return topo, remote.SshReach()
    try:
        topo, mapping = slurm.assign(topo, [str(reached[h]["node"]) for h in topo.hosts])
    except OSError as exc:  # (a node Slurm does not know any more, by name or address)
        raise RunError(f"the run's Slurm nodes cannot be found: {exc}; nothing was"
                       " touched") from None
    return topo, slurm.Steps([], topo, mapping, run_id,
                             str(reached[next(iter(topo.hosts))]["jobid"]))


def _doors(topo, reached: dict[str, dict], run_id: str, run_dir, secret: str, epoch: int
           ) -> dict[str, remote.AgentLink]:
    """A link to every agent's door, opened (doors.py), not yet proven; RunError,
    with none left open, where one cannot be. An ssh host, or this machine, lost
    from now on is reached again as at launch: a fresh agent (each link's ``again``)."""
    fresh = {**remote.links_for(topo, run_id), **remote.local_links(
        [h for h in reached if not topo.hosts[h].remote], run_id, str(run_dir / ZYGOTE_LOG),
        topo.head_grace, str(run_dir / HEAD_AWAY), secret, epoch, topo.head_restart)}
    links: dict[str, remote.AgentLink] = {}
    try:
        for host, entry in reached.items():
            spec, control = topo.hosts[host], entry["control"]
            links[host] = doors.agent_over_srun(host, spec, control, entry["node"],
                                                entry["jobid"]) if spec.slurm else \
                doors.agent_over_ssh(host, spec, control, fresh[host]) if spec.ssh else \
                doors.agent(host, control, fresh[host])
    except BaseException:
        for link in links.values():
            link.abandon()
        raise
    return links


def _launched(run_dir) -> Plan:
    """The plan the run was launched with; RunError, saying so, when its file is
    damaged (nothing of the job is touched)."""
    path = run_dir / PLAN
    try:
        return stored.load(json.loads(path.read_text()), str(path))
    except (OSError, ValueError) as exc:
        raise RunError(f"{path} cannot be read ({exc}): the run folder is damaged; a new"
                       " head cannot know what the job should be, and touched nothing")\
            from None


def _breaks(doc: dict) -> dict[str, int]:
    """Each world's breaks as the last head counted them (its last state.json): the new
    head counts on from there."""
    found = {}
    for world in doc.get("worlds") or ():
        with contextlib.suppress(TypeError, ValueError, KeyError):
            found[str(world["name"])] = int(world.get("breaks") or 0)
    return found


def _found(links: dict[str, remote.AgentLink]) -> dict[str, Found]:
    found = {}
    for host, link in links.items():
        assert link.hello is not None, "knocked: its hello was read"
        for name, told in link.hello["adopted"].get("processes", {}).items():
            seen = Found.read(told, host)
            if seen is not None:
                found[str(name)] = seen
    return found
