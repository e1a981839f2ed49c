"""``mwrun adopt`` and ``mwrun restart-head``: a new head for a run (click's thin
commands; the work is head/adopting.py, run in the new head's own process)."""

from __future__ import annotations

import subprocess
import sys
import time

import click

from mwrun.cli.common import SECONDS, require_live, run_arg, warn
from mwrun.errors import RunError

SAY_EVERY = 5.0  # seconds between two lines of a long wait


@click.command()
@run_arg
@click.option("--grace", type=SECONDS, default=10.0, show_default=True,
              envvar="MWRUN_GRACE", help="Seconds between SIGTERM and SIGKILL on stop.")
@click.option("--force", is_flag=True,
              help="Take the run even from a head that lives (stopped, hung): that head"
                   " is stale from then on, and exits as soon as it runs, changing nothing.")
@click.option("--handover", is_flag=True, hidden=True)  # (mwrun restart-head's)
def adopt(run, grace, force, handover):
    """Become the head of RUN, whose head died while its agents keep it going.

    A run launched with head_grace (topology, seconds) goes on when its head is
    killed: every process keeps running, every world keeps working. Within that
    grace, adopt takes the job back in this terminal, as launch would have it:
    every process with the pid it had, every world as it is; what exited meanwhile
    is restarted and its worlds formed again. Ctrl-C stops the job, as in launch.
    Without RUN: the only run whose head is away.

    \b
    Examples:
      mwrun adopt
      mwrun adopt serve-20261202-101500
      mwrun adopt serve-20261202-101500 --force
    """
    from mwrun import runs
    from mwrun.head import adopting

    run_id, _ = runs.find_sole(run, "mwrun adopt RUN", warn=warn)
    sys.exit(adopting.adopt(run_id, grace, sys.stdout, force, handover))


@click.command("restart-head")
@run_arg
@click.option("--wait", "limit", type=SECONDS, default=60.0, show_default=True,
              help="Seconds to wait for the new head to have the run.")
def restart_head(run, limit):
    """Hand RUN over to a new head process, with nothing of the job touched.

    The new head (this machine's mwrun: an upgraded one, say) takes the run as
    mwrun adopt does, from the head that runs it now; every process keeps its pid
    and every world its generation, and no member notices. The old head says so
    in its terminal and ends; the new one's console is the run folder's
    supervisor.log (mwrun status RUN --watch follows the run).

    \b
    Examples:
      mwrun restart-head
      mwrun restart-head serve-20261202-101500
    """
    from mwrun import runs
    from mwrun.schema import SUPERVISOR_LOG

    run_id, state = runs.find_sole(run, "mwrun restart-head RUN", warn=warn)
    state = require_live(run_id, state)
    old = state.get("epoch") or 1
    log = runs.run_path(run_id) / SUPERVISOR_LOG
    with open(log, "ab") as out:
        head = subprocess.Popen([sys.executable, "-m", "mwrun", "adopt", run_id, "--handover"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    click.echo(f"starting a new head for {run_id} (pid {head.pid}; its console:"
               f" {log})...")
    began = time.monotonic()
    said = began
    while True:
        now = runs.read_state(run_id) or {}
        # Taken once the new head's loop runs: while it adopts, state.json says so.
        if (now.get("epoch") or 1) > old and now.get("supervisor_pid") == head.pid \
                and "head" not in now:
            click.echo(f"run {run_id} is run by its new head (pid {head.pid}, epoch"
                       f" {now['epoch']}) after {time.monotonic() - began:.1f}s; its"
                       f" processes and worlds are as they were")
            return
        if head.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise RunError(f"the new head ended ({head.returncode}) before it took the run;"
                           " the old head keeps it:\n  " + "\n  ".join(tail))
        if time.monotonic() - began > limit:
            raise RunError(f"the new head (pid {head.pid}) did not take the run within"
                           f" {limit:g}s; it goes on trying (see {log})")
        if time.monotonic() - said >= SAY_EVERY:
            said = time.monotonic()
            click.echo(f"  waiting for the new head: {said - began:.0f}s so far")
        time.sleep(0.05)  # another process's file: nothing to block on
