"""The commands mwrun runs itself, hidden from ``--help``: ``agent`` (the head's hands
on a host) and ``agent-door`` (a new head's way to an ssh host's agent)."""

from __future__ import annotations

import sys

import click


@click.command(hidden=True)
@click.option("--host", "host_name", help="The topology's name of this host.")
@click.option("--control", required=True, help="Where this host's processes reach us.")
@click.option("--connect", help="ADDR:PORT of the head (Slurm); else stdin/stdout (ssh).")
@click.option("--silence", type=click.FloatRange(min=0.1), default=None,
              help="Seconds without a frame before the head counts as gone.")
@click.option("--zygote-log", help="Where its zygotes write (kept); else beside --control.")
@click.option("--head-grace", type=click.FloatRange(min=0), default=0.0,
              help="Seconds everything goes on once the head is gone (0: stop at once).")
@click.option("--away-note", help="Where to write that the head is away (the run folder's).")
@click.option("--head-restart", is_flag=True,
              help="Start a new head (mwrun adopt) when the head dies (the head's machine).")
def agent(host_name, control, connect, silence, zygote_log, head_grace, away_note,
          head_restart):
    """Internal: the head's hands on a host (its own machine's too), started by mwrun
    launch, over ssh or srun on a remote one; it speaks frames on stdin/stdout (see
    mwrun/host/frames.py)."""
    from mwrun.host import agent as host_agent
    from mwrun.host import frames

    sys.exit(host_agent.main(host_name, control, connect,
                             silence if silence is not None else frames.SILENCE, zygote_log,
                             head_grace, away_note, head_restart))


@click.command("agent-door", hidden=True)
@click.argument("path")
def agent_door(path):
    """Internal: a new head's way to an ssh host's agent (mwrun adopt): stdin and stdout
    joined to that agent's door at PATH (mwrun/host/door.py)."""
    from mwrun.host import door

    sys.exit(door.bridge(path))
