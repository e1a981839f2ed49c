"""``mwrun launch``: plan, bind, host the stores, start, supervise, report.

Everything that can be wrong with the topology or the machine (a port in use, a host
that is not this machine) is found before a process starts and reported like any
topology error.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from mwrun import runs
from mwrun.errors import RunError, StaleHead, TopologyError
from mwrun.head import epochs
from mwrun.head.hosts import remote, slurm
from mwrun.head.hosts.stores import StoreKeeper
from mwrun.head.observe import rundir
from mwrun.head.observe.console import Printer, RotatedOutput
from mwrun.host.frames import Kind
from mwrun.plan import environment, inventory, placement, ports, stored, topology
from mwrun.schema import (
    AGENTS,
    FINAL,
    HEAD_AWAY,
    KEEPER_DOOR,
    KEEPER_LOG,
    KEEPER_SOCK,
    PLAN,
    SUPERVISOR_LOG,
    TOPOLOGY,
    ZYGOTE_LOG,
)
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.terminal import count, seconds, use_colour

if TYPE_CHECKING:
    from mwrun.head.decide.supervisor import Supervisor
    from mwrun.records import Tally

DETACH_WAIT = 120.0  # seconds --detach waits for its supervisor to run
FORM_WAIT = 120.0  # then, for the run's worlds to form
# Seconds every member of a world runs without a word to mwrun's library (a hello)
# before --detach takes it for a plain script's and says it cannot tell: a process
# using the library says hello once it has imported torch and called mwrun.init().
QUIET = 15.0
SAY_EVERY = 10.0  # seconds between two lines of a long wait
ASK_WAIT = 10.0  # seconds an answer from the supervisor may take
POLL = 0.2  # seconds between two looks


def plan_for_launch(path: str, run_id: str | None = None, connect: bool = True,
                    progress=None, metrics: str | None = None):
    """(topology, plan, listening socket per world, (agent links, slurm.Steps or None),
    run id or None)
    ready to start, or TopologyError / RunError. With ``connect``, remote hosts' agents are
    started first (in parallel), and placement uses what each host reports. ``metrics``:
    where the head serves Prometheus metrics, over the topology's word."""
    topo, mapping = _hosts_of(topology.load(path))
    if metrics is not None:
        topo = replace(topo, metrics=metrics)
    if topo.metrics is not None:  # said before anything starts (MetricsError)
        from mwrun.head.serve import scrapes

        scrapes.check(topo.metrics)
    inv = inventory.inventory(topo)
    if not any(inv[n].local and h.netns is None for n, h in topo.hosts.items()):
        # Before reaching out to any host: the stores must live where we run.
        raise TopologyError([topo.pos.get("hosts", next(iter(topo.hosts.values())).pos
                                          ).diagnostic(
            "none of the hosts is this machine; run mwrun launch on the host that hosts the"
            " worlds' stores (the first host without ssh:)")])
    # The agents' sockets are named before the run folder (and its id) exists.
    key = run_id or f"{topo.name}-{secrets.token_hex(6)}"
    links, reach = _reach(topo, mapping, key, progress) if connect else ({}, None)
    try:
        inv.update(remote.reported_inventory(topo, links, inv))
        topo, plan, listeners = _place_and_bind(topo, inv)
    except BaseException:
        _let_go((links, reach))
        raise
    return topo, plan, listeners, (links, reach), run_id


def _hosts_of(topo):
    """(topology, host -> Slurm node or None): under Slurm, the hosts take the
    allocation's nodes, and their addresses."""
    if topo.launcher != "slurm":
        return topo, None
    return slurm.assign(topo, slurm.allocation())


def _reach(topo, mapping, run_id: str, progress) -> tuple[dict, object]:
    """Every remote host's agent, up and checked: (links, how a lost host is reached
    again: ``agents.Reach``, the srun steps under Slurm, ssh otherwise)."""
    if mapping is not None:
        jobid = slurm.job_id()
        links, srun = slurm.connect(topo, mapping, run_id, progress, jobid=jobid)
        return links, slurm.Steps([srun], topo, mapping, run_id, jobid)
    ssh_links = remote.links_for(topo, run_id)
    if ssh_links:
        remote.connect_all(list(ssh_links.values()), progress=progress)
    return ssh_links, remote.SshReach()


def _let_go(agents) -> None:
    links, reach = agents
    for link in links.values():
        link.close()
    if reach is not None:
        reach.close(wait=0)


def _place_and_bind(topo, inv):
    bound: dict[int, socket.socket] = {}

    def choose(addr: str, taken: set[int]) -> int:
        sock = ports.bind_free(addr, taken)
        bound[sock.getsockname()[1]] = sock
        return sock.getsockname()[1]

    try:
        plan = placement.place(topo, inv, choose, sys.executable)
    except TopologyError:
        for sock in bound.values():
            sock.close()
        raise
    errors = []
    if not inv[plan.store_host].local:
        errors.append(topo.hosts[plan.store_host].pos.diagnostic(
            f"host '{plan.store_host}' ({topo.hosts[plan.store_host].addr}) is not this"
            " machine; run mwrun launch there: it hosts the worlds' stores"))
    for proc in topo.processes.values():
        if not inv[proc.host].local and not topo.hosts[proc.host].remote:
            errors.append(proc.pos.get("host", proc.pos["name"]).diagnostic(
                f"process '{proc.name}': host '{proc.host}' is not this machine; give the"
                " host 'ssh: [user@]host[:port]' (or launcher: slurm) so mwrun can reach it"))
    listeners = {}
    for name, world in plan.worlds.items():
        if world.port in bound:
            listeners[name] = bound.pop(world.port)
            continue
        try:
            listeners[name] = _bind(world.addr, world.port)
        except OSError as exc:
            errors.append(topo.worlds[name].pos["port"].diagnostic(
                f"world '{name}': port {world.port} on {world.addr} is not free"
                f" ({exc.strerror})"))
    if errors:
        for sock in listeners.values():
            sock.close()
        raise TopologyError(errors)
    return topo, plan, listeners


def _bind(addr: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((addr, port))
        sock.listen(512)
    except OSError:
        sock.close()
        raise
    return sock


def run(path: str, run_id: str | None, grace: float, stream=sys.stdout,
        metrics: str | None = None) -> int:
    """Launch in this process and supervise until the job ends; returns the exit status."""
    launched = time.time()  # what "after launch" counts from: the zygotes start before the loop
    _more_descriptors()
    topo, plan, listeners, agents, run_id = plan_for_launch(path, run_id,
                                                           progress=_progress(stream),
                                                           metrics=metrics)
    return _supervise(path, topo, plan, listeners, agents, run_id, grace, stream,
                      existing_dir=False, launched=launched)


def run_detached(path: str, run_id: str, grace: float) -> int:
    """The background half of ``--detach``: the plan and its bound sockets come from
    the parent on stdin (planned once, so the ports it checked are the ones used);
    the console goes to ``supervisor.log``, rotated. Remote hosts are reached from
    here (an agent's link belongs to the process that supervises)."""
    launched = time.time()
    _more_descriptors()
    handed = json.load(sys.stdin.buffer)  # JSON, as plan.json keeps it (plan/stored.py)
    listeners = {name: socket.socket(fileno=fd) for name, fd in handed["fds"].items()}
    try:
        plan = stored.load(handed["plan"], "the plan handed to the detached head")
        log = RotatedOutput(rundir.run_path(run_id) / SUPERVISOR_LOG)
        topo, mapping = _hosts_of(topology.load(path))
        agents = _reach(topo, mapping, run_id, _progress(log))
    except BaseException:
        for sock in listeners.values():
            sock.close()
        raise
    return _supervise(path, topo, plan, listeners, agents, run_id, grace, log,
                      existing_dir=True, launched=launched)


def _progress(stream):
    def say(text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            stream.write(f"mwrun | {text}\n")
            stream.flush()
    return say


def _supervise(path: str, topo, plan, listeners: dict, agents, run_id: str, grace: float,
               stream, existing_dir: bool, launched: float) -> int:
    links, reach = agents
    run_dir = None
    try:
        run_dir = rundir.run_path(run_id) if existing_dir else rundir.create(run_id, plan.name)
        run_id = run_dir.name
        shutil.copyfile(path, run_dir / TOPOLOGY)
        rundir.write_json(run_dir / PLAN, stored.dump(plan))
        widest = max((len(f"{n}-{s.scale.max - 1}") for n, s in topo.scaled.items()
                      if s.scale is not None), default=0)  # its replicas' names line up
        printer = Printer(list(plan.processes), stream, use_colour(stream), run_dir, widest)
        printer.event(f"run {run_id}: {count(len(plan.processes), 'process', 'processes')}"
                      f" in {count(len(plan.worlds), 'world')}; logs in {run_dir}; it runs"
                      f" until its processes end or you stop it (Ctrl-C here, or mwrun stop"
                      f" {run_id})")
        printer.event(f"watch it: mwrun status {run_id} --watch;"
                      f" drill it: mwrun kill-world {next(iter(plan.worlds))} {run_id}")
        # The head's own machine's hosts get their agent too: every process is an
        # agent's, the head starts none. Their zygotes start at once (imports are the
        # bring-up's longest step; the head's own start runs beside them).
        inv = inventory.inventory(topo)
        here = [n for n in topo.hosts if inv[n].local and n not in links]
        # This head's epoch (1), and the secret a new head proves itself with: the
        # remote hosts' agents are told it over their link once the loop runs
        # (Agents.reached), the head's machine's have it in their environment.
        epoch, secret = epochs.take(run_dir, why="launch"), epochs.make_secret(run_dir)
        sshed = {n: link for n, link in links.items() if topo.hosts[n].ssh}
        local = remote.local_links(here, run_id, str(run_dir / ZYGOTE_LOG), topo.head_grace,
                                   str(run_dir / HEAD_AWAY), secret, epoch,
                                   topo.head_restart and len(sshed) == len(links))
        if local:
            remote.connect_all(list(local.values()), progress=_progress(stream))
            links, reach = {**links, **local}, reach or remote.SshReach()
            agents = (links, reach)
        # Where a new head finds each agent again.
        rundir.write_json(run_dir / AGENTS, {name: rundir.agent_entry(link.hello)
                                             for name, link in links.items()
                                             if link.hello is not None})
        torch_zygote = _prepare_first(plan, run_id, local)
        # The worlds' stores, in their keeper: its agent forks it from a zygote that
        # imports torch (the loop asks it first), else starts it cold.
        stores = StoreKeeper(plan, listeners, run_dir / KEEPER_LOG,
                             runs.socket_path(run_id, KEEPER_SOCK), torch_zygote,
                             topo.head_grace, runs.socket_path(run_id, KEEPER_DOOR))
        from mwrun.head.loop import Loop
    except BaseException as exc:
        for sock in listeners.values():
            sock.close()
        _let_go(agents)
        _never_started(run_dir, exc)
        raise
    topo_hosts = [(name, host.addr) for name, host in topo.hosts.items()]
    try:
        # What every host offers, as its agent reported it: a scaled process's new
        # replicas are placed where their host has room.
        inv.update(remote.reported_inventory(topo, links, inv))
        loop = Loop(plan, run_id, run_dir, stores, printer, grace,
                    str(rundir.control_path(run_id)), topo, inv, links, reach, topo_hosts,
                    launched)
        code = handed_over(loop.run, printer, run_id)
        if code is None:
            return 0
        summary(printer, loop.supervisor, loop.tally, loop.run_id, loop.started_at)
    except BaseException as exc:
        _never_started(run_dir, exc)
        raise
    finally:
        printer.close()
    return code


def _prepare_first(plan, run_id: str, local: dict) -> tuple[tuple[str, ...], dict] | None:
    """The zygotes of the head's own machine asked for now, before the loop is built
    (the loop asks for every process's again; a host's agent starts each once), and the
    one the keeper is to be forked from: (modules, environment) of a zygote that imports
    torch on the store host, or None. The agent was started with the head's environment, so each
    start's environment is computed here as it is there."""
    keeper, asked = None, set()
    for name, proc in plan.processes.items():
        if not proc.preload or proc.host not in local or (proc.host, proc.preload) in asked:
            continue  # one per host and preload starts its zygote: the loop asks for the rest
        asked.add((proc.host, proc.preload))
        link = local[proc.host]
        spec = environment.launch_spec(plan, name, run_id=run_id,
                                       control=str(link.hello["control"]),
                                       generations=dict.fromkeys(proc.worlds, 0),
                                       restart_count=0)
        link.send(Kind.PREPARE, **spec.to_fields())
        if keeper is None and proc.host == plan.store_host and "torch" in spec.preload:
            keeper = (tuple(spec.preload), spec.environ(os.environ))
    return keeper


def _never_started(run_dir, exc: BaseException) -> None:
    """A run that ended before its supervisor wrote a state of its own says so: failed
    (130 for Ctrl-C), never "starting" for ever."""
    if run_dir is not None:
        rundir.end_unstarted(run_dir, 130 if isinstance(exc, KeyboardInterrupt) else 1)


def _more_descriptors() -> None:
    """Every world's store holds two connections per member (and its pipes, pidfds and
    agent links add up): a big job outgrows the usual soft limit of 1024 long before
    the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1 << 20), hard))


def handed_over(run: Callable[[], int], printer: Printer, run_id: str) -> int | None:
    """The loop ``run`` to its end: its exit status; None when it handed the run over
    to a new head (mwrun restart-head), which this head says, for its terminal."""
    try:
        return run()
    except StaleHead as exc:
        if not exc.handed:
            raise
        printer.event(f"{exc}; mwrun status {run_id} --watch follows it")
        return None


def summary(printer: Printer, sup: Supervisor, tally: Tally, run_id: str,
             started_at: float) -> None:
    """The finish line. Its restarts and world breaks are the run's, counted over its
    history records as ``report`` counts them (records.Tally): what the job holds at
    the end has forgotten a retired replica's restarts and a removed world's breaks."""
    took = seconds(time.time() - started_at)
    failed = [r for r in sup.procs.values() if r.state is P.FAILED]
    printer.event(f"run {run_id} {sup.state.value} after {took}:"
                  f" {count(tally.restarts, 'restart')}, {count(tally.breaks, 'world break')}"
                  + (f"; failed: {', '.join(r.plan.name for r in failed)}" if failed else ""))


def detach(path: str, run_id: str | None, grace: float,
           metrics: str | None = None) -> tuple[str, int]:
    """Start the supervisor in the background; return once it runs and the job came up
    (or say why not, leaving nothing running): (the run id, the exit status that
    ``launch --detach`` gives: 1 when a process failed before its worlds formed)."""
    # Every mistake shows here, in the terminal, a host that cannot be reached included;
    # placement uses what the hosts report (never 0 GPUs assumed). Their agents are let
    # go once that is known: the child reaches them again, since an agent's link
    # belongs to the process that supervises.
    _, plan, listeners, agents, run_id = plan_for_launch(path, run_id,
                                                         progress=_progress(sys.stderr),
                                                         metrics=metrics)
    _let_go(agents)
    try:
        run_dir = rundir.create(run_id, plan.name)
        run_id = run_dir.name
        child = _start_detached(path, run_id, grace, run_dir, plan, listeners)
    finally:
        for sock in listeners.values():
            sock.close()  # the child has its own copies now
    try:
        _wait_running(child, run_id, run_dir)
        code = _wait_formed(run_id, _progress(sys.stderr),
                            lambda: child.poll() is not None)
    except BaseException:
        _stop(child, grace)  # given up (or interrupted): no job runs unwatched by anyone
        raise
    return run_id, code


def _start_detached(path: str, run_id: str, grace: float, run_dir, plan,
                    listeners: dict) -> subprocess.Popen:
    fds = {name: sock.fileno() for name, sock in listeners.items()}
    with open(run_dir / SUPERVISOR_LOG, "ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "mwrun", "launch", os.path.abspath(path), "--run-id",
             run_id, "--grace", str(grace), "--detached-child"],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=list(fds.values()), start_new_session=True, cwd=os.getcwd())
    assert child.stdin is not None, "stdin=PIPE above"
    with contextlib.suppress(BrokenPipeError), child.stdin:
        child.stdin.write(json.dumps({"plan": stored.dump(plan), "fds": fds}).encode())
    return child


def _wait_running(child: subprocess.Popen, run_id: str, run_dir) -> None:
    deadline = time.monotonic() + DETACH_WAIT
    while time.monotonic() < deadline:
        state = rundir.read_state(run_id)
        if state and state.get("state") != R.STARTING:
            return
        if child.poll() is not None:
            break
        time.sleep(0.1)  # waiting for another process's file; nothing to block on
    else:
        raise RunError(f"the supervisor did not start within {DETACH_WAIT:g}s; it was"
                       f" stopped (see {run_dir / SUPERVISOR_LOG})")
    with contextlib.suppress(OSError):
        tail = (run_dir / SUPERVISOR_LOG).read_text().strip().splitlines()[-5:]
        raise RunError("the supervisor did not start:\n  " + "\n  ".join(tail))
    raise RunError("the supervisor did not start")


def _wait_formed(run_id: str, say, ended, clock=time.monotonic) -> int:
    """Until the job came up, or failed to: the exit status ``--detach`` gives, said
    (``judge``). Which worlds it waits for is said as that changes, and every SAY_EVERY
    seconds of a long wait; past FORM_WAIT the run is left running, and this says so.
    ``ended()``: whether the supervisor's process has ended."""
    began = clock()
    said, say_at = None, began + SAY_EVERY
    while True:
        seen = _bringup(run_id)
        if seen is None and ended():  # gone without a last word: killed, or it crashed
            say(f"the supervisor has ended before the job came up (see"
                f" {rundir.run_path(run_id) / SUPERVISOR_LOG})")
            return 1
        verdict = judge(seen, QUIET) if seen is not None else None
        if verdict is not None:
            text, code = verdict
            say(text.replace("{run}", run_id))
            return code
        now = clock()
        waiting = sorted(seen["waiting"]) if seen is not None else said
        # What it waits for is said before it gives up waiting, even where the first
        # answer came only past FORM_WAIT (a loaded machine's slow start).
        if waiting and (waiting != said or now >= say_at):
            formed = seen["worlds"] - len(waiting) if seen is not None else 0
            say(f"waiting for {count(len(waiting), 'world')} to form: {_names(waiting)}"
                + (f" ({formed} formed; {now - began:.0f}s so far)" if said else ""))
            said, say_at = waiting, now + SAY_EVERY
        if now - began >= FORM_WAIT:
            say(f"{_names(waiting or [])} had not formed after {FORM_WAIT:g}s; the run goes on"
                f" (mwrun status {run_id} shows what each member is doing)")
            return 0
        time.sleep(POLL)  # another process's answers; nothing to block on


def _bringup(run_id: str) -> dict | None:
    """What the supervisor says of the bring-up (control verb ``bringup``); once it
    has ended, what its last status document says; None when neither can be read now
    (a supervisor too busy to answer in time, or not listening yet)."""
    with contextlib.suppress(RunError):
        return runs.request(str(rundir.control_path(run_id)), {"verb": "bringup"},
                            timeout=ASK_WAIT)
    state = rundir.read_state(run_id) or {}
    if state.get("state") not in FINAL:
        return None
    failed = {p["name"]: p.get("last_event") or p["state"]
              for p in state.get("processes", []) if p.get("state") == P.FAILED}
    return {"state": state["state"], "worlds": len(state.get("worlds", [])), "waiting": {},
            "failed": failed}


def judge(seen: dict, quiet: float) -> tuple[str, int] | None:
    """What ``--detach`` says and its exit status, given what the supervisor says of
    the bring-up (``_bringup``); None while it must wait. ``{run}`` stands for the run.

    1 at once when a process failed (or was restarted) before its worlds formed, or
    the run failed, or is stopping; 0 when every world formed, or the run finished; 0 too,
    saying so, when the only worlds left are ones mwrun cannot see form: no member
    joins them through mwrun's library (none said hello after ``quiet`` seconds of
    running: plain scripts), and no plain group shows in their stores."""
    state, failed, waiting = seen["state"], seen["failed"], seen["waiting"]
    if state == R.STOPPING:  # someone stopped it: what its processes did since is no news
        return "the run is stopping (mwrun status {run})", 1
    if failed:
        what = "".join(f"\n  {why if why.startswith(name) else f'{name}: {why}'}"
                       for name, why in failed.items())
        after = ("the run has failed" if state == R.FAILED else
                 "the run has ended" if state in FINAL else
                 "the run goes on (mwrun stop {run} ends it)")
        return (f"{count(len(failed), 'process', 'processes')} failed before"
                f" {'its' if len(failed) == 1 else 'their'} worlds formed; {after};"
                f" mwrun logs PROCESS {{run}} shows why:{what}", 1)
    if state == R.FINISHED:
        return "the run has finished: every process exited 0", 0
    if state == R.FAILED:
        return "the run has failed (mwrun status {run})", 1
    if not waiting:
        return "every world formed", 0
    unseen = [name for name, world in waiting.items() if not world["library"]
              and (world["opaque"] or (world["up_s"] is not None and world["up_s"] >= quiet))]
    if len(unseen) < len(waiting):
        return None
    return (f"mwrun cannot tell whether {_names(unseen)} will form: no member joins"
            f" {'it' if len(unseen) == 1 else 'them'} through mwrun's library (a plain"
            " script?) and no group shows in its store; the run goes on (mwrun status"
            " {run})", 0)


def _names(worlds: list[str], shown: int = 8) -> str:
    """A list of worlds short enough for one line."""
    more = len(worlds) - shown
    return ", ".join(worlds[:shown]) + (f" and {more} more" if more > 0 else "")


def _stop(child: subprocess.Popen, grace: float) -> None:
    """Stop a detached supervisor as Ctrl-C would, then for good."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)
        try:
            child.wait(timeout=grace + 5.0)
            return
        except subprocess.TimeoutExpired:
            continue
