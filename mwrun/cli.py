"""The command line: thin click commands that parse, delegate and map to exit codes."""

from __future__ import annotations

import sys

import click

from mwrun import __version__
from mwrun.errors import MwrunError, TopologyError

EPILOG = """\b
Examples:
  mwrun validate configs/star.yaml
  mwrun launch configs/star.yaml --dry-run
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


@click.group(cls=_Group, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mwrun")
def main():
    """Launch and supervise PyTorch jobs made of several independent worlds.

    A world is a process group with its own store; a crash, hang or kill in one
    world never spreads to the others.
    """


topology_arg = click.argument("topology", type=click.Path(dir_okay=False, path_type=str))


def _plan(path: str, choose_port):
    from mwrun import inventory, placement, topology

    topo = topology.load(path)
    return topo, placement.place(topo, inventory.inventory(topo), choose_port, sys.executable)


@main.command()
@topology_arg
def validate(topology):
    """Check a topology file and report every problem with its position.

    Exit status 0 when it is right, 2 when it is not.
    """
    from mwrun.ports import probe_free

    _, plan = _plan(topology, probe_free)
    worlds = "; ".join(f"{w.name}: {', '.join(w.members)}" for w in plan.worlds.values())
    click.echo(f"{topology}: ok: {len(plan.processes)} processes, {len(plan.worlds)} worlds"
               f" ({worlds})")


@main.command()
@topology_arg
@click.option("--dry-run", is_flag=True, help="Print the plan and start nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: the plan as JSON.")
@click.option("--run-id", help="Name of the run (default: NAME-YYYYMMDD-HHMMSS).")
def launch(topology, dry_run, as_json, run_id):
    """Plan, start and supervise the job in TOPOLOGY.

    \b
    Examples:
      mwrun launch configs/star.yaml --dry-run
      mwrun launch configs/star.yaml --dry-run --json
    """
    from mwrun import environment, planview, rundir
    from mwrun.ports import probe_free

    if as_json and not dry_run:
        raise click.UsageError("--json goes with --dry-run")
    _, plan = _plan(topology, probe_free)
    run_id = run_id or rundir.new_run_id(plan.name)
    control = str(rundir.control_path(run_id))
    envs = {name: environment.mwrun_env(plan, name, run_id=run_id, control=control)
            for name in plan.processes}
    if dry_run:
        click.echo(planview.plan_json(plan, envs) if as_json else planview.plan_text(plan, envs))
        return
    raise click.UsageError("only --dry-run is available in this version")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
