"""The command line: thin click commands that parse, delegate and map to exit codes."""

from __future__ import annotations

import sys
import time
import warnings

import click

from mwrun import __version__
from mwrun.cli import acting, adopting, housekeeping, inspecting, internal, reading, scaling
from mwrun.cli.common import SECONDS, run_arg, topology_arg, warn
from mwrun.errors import MwrunError, RunError, TopologyError
from mwrun.schema import FINAL

EPILOG = """\b
Examples:
  mwrun validate configs/star.yaml
  mwrun launch configs/star.yaml --dry-run
  mwrun launch configs/star.yaml
  mwrun status --watch
  mwrun kill-world world1
  mwrun drill --every 10 --for 120
  mwrun scale worker=6
  mwrun drain worker-2
  mwrun stacks --world world1
  mwrun logs worker-0 -f
  mwrun stop
  mwrun adopt
  mwrun restart-head
  mwrun report -o drill.png
  mwrun runs
  mwrun clean --dry-run

Runs live under $MWRUN_HOME (default ~/.mwrun). Without RUN, status and logs
mean the newest run, live or not; kill-world and stop the only live run (with
two or more live, name one). A run whose head died without ending it is lost,
unless its head_grace keeps it going until mwrun adopt takes it back.
mwrun clean keeps the newest 20 finished runs unless told otherwise.
"""


class _Group(click.Group):
    """Turns mwrun's own errors into one clear message and the documented exit status."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TopologyError as exc:
            click.echo(str(exc), err=True)
            count = len(exc.diagnostics)
            click.echo(f"{count} problem{'s' * (count != 1)} found; nothing was started.",
                       err=True)
            ctx.exit(exc.exit_code)
        except MwrunError as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except PermissionError as exc:  # another user's run folder, a locked-down home
            click.echo(f"Error: {exc.filename or 'mwrun'}: {exc.strerror}", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)


@click.group(cls=_Group, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mwrun")
def main():
    """Launch and supervise PyTorch jobs made of several independent worlds.

    A world is a process group with its own store; a crash, hang or kill in one
    world never spreads to the others.
    """


for _command in (acting.kill_world, acting.drill, acting.stop, adopting.adopt,
                 adopting.restart_head, internal.agent, internal.agent_door, scaling.scale,
                 scaling.drain, inspecting.stacks, reading.logs, reading.report,
                 housekeeping.runs_, housekeeping.clean):
    main.add_command(_command)


def _plan(path: str):
    """The plan of a topology that starts nothing: validate and --dry-run. Its hosts may
    all be other machines (only a launch needs to be on one of them), and ports
    written in it are checked to be free here."""
    from mwrun.plan import inventory, placement, ports, topology

    topo = topology.load(path)
    return topo, placement.place(topo, inventory.inventory(topo), ports.probe_free,
                                 sys.executable, here=False, port_in_use=ports.in_use)


@main.command()
@topology_arg
def validate(topology):
    """Check a topology file and report every problem with its position.

    Exit status 0 when it is right, 2 when it is not.
    """
    from mwrun.plan import scripts
    from mwrun.terminal import count
    topo, plan = _plan(topology)
    worlds = "; ".join(f"{w.name}: {', '.join(w.members)}" for w in plan.worlds.values())
    click.echo(f"{topology}: ok: {count(len(plan.processes), 'process', 'processes')},"
               f" {count(len(plan.worlds), 'world')} ({worlds})")
    away = scripts.unchecked(topo)
    if away:  # what validate could not see is said, not passed over in silence
        click.echo(f"{topology}: note: the python scripts of {', '.join(away)} were not"
                   " checked: they run on other machines, whose files cannot be seen"
                   " from here", err=True)
    # A zygote imports these once for many processes, before any process's own
    # variables exist: a module that reads them at import cannot see them (docs/topology.rst).
    beyond = sorted({m for p in plan.processes.values() for m in p.preload
                     if m != "torch" and not m.startswith("torch.")})
    if beyond:
        click.echo(f"{topology}: warning: preload {', '.join(beyond)}: imported once per"
                   " zygote, not in each process; at import these see none of the"
                   " variables mwrun sets per process (RANK, WORLD_SIZE, MASTER_ADDR, ..."
                   " MWRUN_PROCESS, CUDA_VISIBLE_DEVICES), and a value drawn or an object"
                   " made then is the same in every process forked from it"
                   " (docs/topology.rst: Warm starts)", err=True)


def _listen_addr(ctx, param, value: str | None) -> str | None:
    from mwrun.plan.fields import listen_error

    why = None if value is None else listen_error(value)
    if why is not None:
        raise click.BadParameter(why)
    return value


@main.command()
@topology_arg
@click.option("--dry-run", is_flag=True, help="Print the plan and start nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: the plan as JSON.")
@click.option("--detach", is_flag=True, help="Run in the background; print the run id.")
@click.option("--run-id", help="Name of the run (default: NAME-YYYYMMDD-HHMMSS).")
@click.option("--grace", type=SECONDS, default=10.0, show_default=True,
              envvar="MWRUN_GRACE", help="Seconds between SIGTERM and SIGKILL on stop.")
@click.option("--metrics", metavar="HOST:PORT", callback=_listen_addr,
              help="Serve Prometheus metrics at http://HOST:PORT/metrics (the topology's"
                   " 'metrics: {addr: HOST:PORT}'; this wins).")
@click.option("--detached-child", is_flag=True, hidden=True)
def launch(topology, dry_run, as_json, detach, run_id, grace, metrics, detached_child):
    """Plan, start and supervise the job in TOPOLOGY.

    Every process's output is shown prefixed with its name and kept in the run's
    logs. Ctrl-C (or SIGTERM) stops the job: SIGTERM to every process, then SIGKILL
    after --grace seconds; a second Ctrl-C kills at once. Exit status: 0 when every
    process ended well (or was stopped by you), 1 when the job failed, 2 for a bad
    topology. With --detach: 0 once every world formed (or where mwrun cannot tell,
    said), 1 at once when a process failed before its worlds formed.

    \b
    Examples:
      mwrun launch configs/star.yaml --dry-run
      mwrun launch configs/star.yaml
      mwrun launch configs/star.yaml --detach --run-id demo
      mwrun launch configs/serve.yaml --metrics 127.0.0.1:9400
    """
    if as_json and not dry_run:
        raise click.UsageError("--json goes with --dry-run")
    from mwrun.plan.environment import QUIET_NUMPY

    # The supervisor imports torch too (its stores): as quiet as the processes it starts.
    warnings.filterwarnings(*QUIET_NUMPY.split(":")[:2], UserWarning)
    if dry_run:
        _dry_run(topology, run_id, as_json)
        return
    from mwrun.head import bringup

    if detach:
        run, code = bringup.detach(topology, run_id, grace, metrics)
        click.echo(f"started run {run} in the background\n"
                   f"  mwrun status {run} --watch\n  mwrun logs PROCESS {run} -f\n"
                   f"  mwrun stop {run}")
        sys.exit(code)  # 1: a process failed before its worlds formed (said above)
    if detached_child:  # the plan (its metrics address too) comes from the parent
        sys.exit(bringup.run_detached(topology, run_id, grace))
    sys.exit(bringup.run(topology, run_id, grace, sys.stdout, metrics))


def _dry_run(topology: str, run_id: str | None, as_json: bool) -> None:
    from mwrun import runs
    from mwrun.cli import planview
    from mwrun.plan import environment, timeouts

    topo, plan = _plan(topology)
    run_id = run_id or runs.new_run_id(plan.name)

    def control(host: str) -> str:
        # A process talks to its host's agent (this machine's too), on a socket the
        # agent makes when it starts (its pid in the name): said, not invented.
        return f"/tmp/mwrun-agent-<run and host>/control-<{host}'s agent pid>.sock"

    envs = {name: environment.mwrun_env(plan, name, run_id=run_id, control=control(p.host))
            for name, p in plan.processes.items()}
    chains = timeouts.chains(topo)
    click.echo(planview.plan_json(plan, envs, chains) if as_json
               else planview.plan_text(plan, envs, chains))


def _live_status(run: str | None) -> tuple[str, dict, bool]:
    """(run id, status document, whether its supervisor answered)."""
    from mwrun import runs

    run_id, state = runs.find(run, live_only=False, warn=warn)
    if runs.is_live(state):
        try:
            reply = runs.request(state["control"], {"verb": "status"})
            return run_id, reply["status"], True
        except RunError:
            pass
    return run_id, state, False


@main.command()
@run_arg
@click.option("--json", "as_json", is_flag=True, help="The status document as JSON.")
@click.option("--watch", "-w", is_flag=True, help="Refresh every second until the run ends.")
def status(run, as_json, watch):
    """Processes and worlds of RUN (default: the newest run, live or not).

    Per world: its state, generation and breaks, its traffic over the last 5 s
    (calls/s and MB/s, counted by the members' own calls), the age of its last
    completed call and how long it has been healthy. A world is forming until its
    members have really joined; a plain torch.distributed world mwrun cannot see
    into shows as unknown. --watch redraws in place on a terminal.

    \b
    Examples:
      mwrun status
      mwrun status star-20261122-101500 --json
      mwrun status --watch
    """
    import json

    from mwrun import runs
    from mwrun.cli.statusview import in_place, render
    from mwrun.terminal import use_colour

    # A run's launch plan never changes: read once, not every second (about 1 MB at
    # 1,000 processes); its revisions (mwrun scale) are read again when there are more.
    first, plans, seen = True, {}, {}
    while True:
        run_id, doc, live = _live_status(run)
        if not as_json and (run_id not in plans or seen.get(run_id) != doc.get("revision")):
            launched = plans.get(run_id, {}).get("launched") or runs.read_plan(run_id)
            plans[run_id] = {"launched": launched, "now": runs.plan_now(
                launched, runs.read_revisions(run_id))}
            seen[run_id] = doc.get("revision")
        if as_json:
            click.echo(json.dumps(doc, indent=1 if not watch else None))
        elif watch and sys.stdout.isatty():
            click.echo(in_place(render(doc, live, use_colour(), plan=plans[run_id]["now"]),
                                first), nl=False)
        else:
            click.echo(("" if first else "\n") + render(doc, live, use_colour(),
                                                 events=runs.recent_events(run_id),
                                                 plan=plans[run_id]["now"]))
        first = False
        if not watch or doc["state"] in FINAL or not live:
            return
        run = run_id
        time.sleep(1.0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
