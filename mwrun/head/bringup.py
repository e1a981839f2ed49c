"""``mwrun launch``: plan, bind, host the stores, start, supervise, report.

Everything that can be wrong with the topology or the machine (a port in use, a host
that is not this machine) is found before a process starts and reported like any
topology error.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict

from mwrun.errors import RunError, TopologyError
from mwrun.head import rundir
from mwrun.head.console import Printer
from mwrun.plan import inventory, placement, ports, topology
from mwrun.terminal import seconds, use_colour


def plan_for_launch(path: str):
    """(topology, plan, listening socket per world) ready to start, or TopologyError."""
    topo = topology.load(path)
    inv = inventory.inventory(topo)
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
    for proc in topo.processes.values():
        if not inv[proc.host].local:
            errors.append(proc.pos.get("host", proc.pos["name"]).diagnostic(
                f"process '{proc.name}': host '{proc.host}' is not this machine; mwrun launch"
                " starts processes on this machine (and in its network namespaces: netns:)"))
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
        existing_dir: bool = False) -> int:
    """Launch in this process and supervise until the job ends; returns the exit status."""
    _, plan, listeners = plan_for_launch(path)
    try:
        run_dir = rundir.run_path(run_id) if existing_dir else rundir.create(run_id, plan.name)
        run_id = run_dir.name
        shutil.copyfile(path, run_dir / "topology.yaml")
        rundir.write_json(run_dir / "plan.json", asdict(plan))
        printer = Printer(list(plan.processes), stream, use_colour(stream), run_dir)
        printer.event(f"run {run_id}: {len(plan.processes)} processes in {len(plan.worlds)}"
                      f" worlds; logs in {run_dir}; Ctrl-C stops it")
        printer.event(f"watch it: mwrun status {run_id} --watch;"
                      f" drill it: mwrun kill-world {next(iter(plan.worlds))} {run_id}")
        from mwrun.head.stores import WorldStores  # torch: only now that the plan is sound

        stores = WorldStores(plan, listeners)
    except BaseException:
        for sock in listeners.values():
            sock.close()
        raise
    from mwrun.head.loop import Loop

    loop = Loop(plan, run_id, run_dir, stores, printer, grace,
                    str(rundir.control_path(run_id)))
    try:
        code = loop.run()
    finally:
        printer.close()
    _summary(printer, loop)
    return code


def _summary(printer: Printer, loop) -> None:
    sup = loop.supervisor
    took = seconds(time.time() - loop.started_at)
    failed = [r for r in sup.procs.values() if r.state.value == "failed"]
    restarts = sum(r.restarts for r in sup.procs.values())
    printer.event(f"run {loop.run_id} {sup.state.value} after {took}:"
                  f" {restarts} restart{'s' * (restarts != 1)},"
                  f" {sum(w.breaks for w in sup.worlds.values())} world break(s)"
                  + (f"; failed: {', '.join(r.plan.name for r in failed)}" if failed else ""))


def detach(path: str, run_id: str | None, grace: float) -> str:
    """Start the supervisor in the background; return once it runs (or say why not)."""
    _, plan, listeners = plan_for_launch(path)  # every mistake shows here, in the terminal
    for sock in listeners.values():
        sock.close()
    run_dir = rundir.create(run_id, plan.name)
    run_id = run_dir.name
    log = open(run_dir / "supervisor.log", "ab")  # noqa: SIM115 - handed to the child
    with log:
        child = subprocess.Popen(
            [sys.executable, "-m", "mwrun", "launch", os.path.abspath(path), "--run-id",
             run_id, "--grace", str(grace), "--detached-child"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=os.getcwd())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = rundir.read_state(run_id)
        if state and state.get("state") != "starting":
            return run_id
        if child.poll() is not None:
            break
        time.sleep(0.1)  # waiting for another process's file; nothing to block on
    with contextlib.suppress(OSError):
        tail = (run_dir / "supervisor.log").read_text().strip().splitlines()[-5:]
        raise RunError("the supervisor did not start:\n  " + "\n  ".join(tail))
    raise RunError("the supervisor did not start")
