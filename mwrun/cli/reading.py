"""The verbs that read a run folder, live or not, without its supervisor: ``logs``
and ``report`` (its picture and summary, read through mwrun.records). Thin click
commands; ``commands`` adds them to the ``mwrun`` group."""

from __future__ import annotations

import click

from mwrun.cli.common import run_arg, warn
from mwrun.errors import RunError
from mwrun.schema import LOGS, log_name


@click.command()
@click.argument("process")
@run_arg
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows.")
def logs(process, run, follow):
    """The output of PROCESS in RUN (default: the newest run, live or not).

    \b
    Examples:
      mwrun logs leader
      mwrun logs worker-0 star-20261122-101500 -f
    """
    from mwrun import runs
    from mwrun.cli import logview

    run_id, state = runs.find(run, live_only=False, warn=warn)
    names = [p["name"] for p in state["processes"]]
    if process not in names:
        raise RunError(f"run {run_id} has no process {process!r}; it has: {', '.join(names)}")
    path = runs.run_path(run_id) / LOGS / log_name(process)
    # Followed while the run goes on, its head away included: a new head takes it back.
    logview.show(path, follow, lambda: runs.goes_on(runs.read_state(run_id) or {}),
                 click.echo)


@click.command()
@run_arg
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=str),
              help="The picture: .png (default: report.png in the run's folder), .svg, .pdf.")
def report(run, output):
    """A picture of RUN's history and a summary of its faults (default: the newest run).

    One lane per world with its calls/s over time; kills, breaks, restarts and
    re-forms marked; each broken world's downtime shaded and measured. The summary
    (printed, and under the picture) gives per world its breaks, its downtime, and
    its pace before, during and after each fault, and each drill's summary. Works on
    a live run too. Needs matplotlib: pip install 'mwrun[report]'.

    \b
    Examples:
      mwrun report
      mwrun report star-20261122-101500 -o drill.png
    """
    from mwrun.cli import report as drawing

    for line in drawing.report(run, output):
        click.echo(line)
