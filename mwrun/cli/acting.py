"""The verbs that act on a live run through its supervisor: break a world on purpose
(``kill-world``), a chaos loop of such faults (``drill``), and ``stop``. Each is a thin
click command; ``commands`` adds them to the ``mwrun`` group."""

from __future__ import annotations

import sys
import time

import click

from mwrun.cli.common import require_live, run_arg, warn
from mwrun.errors import RunError
from mwrun.schema import FINAL, HostState
from mwrun.schema import RunState as R


@click.command("kill-world")
@click.argument("world")
@run_arg
@click.option("--rank", type=int, help="Signal exactly this rank of WORLD.")
@click.option("--signal", "sig", default="KILL", show_default=True,
              help="Signal name or number: KILL for a crash, STOP for a hang, TERM...")
def kill_world(world, run, rank, sig):
    """Fault drill: break WORLD by signalling its members that are in no other world.

    Members shared with other worlds survive and see WORLD break; restart policies
    then apply. With --rank, exactly that rank is signalled.

    \b
    Examples:
      mwrun kill-world world1
      mwrun kill-world world1 --signal STOP      # a hang: declared hung after the timeout
      mwrun kill-world world2 --rank 0 --signal TERM
    """
    from mwrun import runs

    try:
        runs.signal_number(sig)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--signal") from None
    run_id, state = runs.find_sole(run, f"mwrun kill-world {world} RUN", warn=warn)
    require_live(run_id, state)
    reply = runs.ask(run_id, state, {"verb": "kill_world", "world": world, "rank": rank,
                                     "signal": sig}, say=warn)
    for hit in reply["signalled"]:
        click.echo(f"sent SIG{sig.upper().removeprefix('SIG')} to {hit['process']}"
                   f" (pid {hit['pid']}, rank {hit['rank']} of {world})")


@click.command()
@run_arg
@click.option("--every", required=True, help="Mean seconds between faults.")
@click.option("--for", "duration", required=True, help="Seconds of drill.")
@click.option("--worlds", help="Comma-separated worlds to fault (default: every world).")
@click.option("--signal", "sig", default="KILL", show_default=True,
              help="KILL (a crash), TERM, SEGV, or STOP (a hang).")
@click.option("--seed", type=int, help="Makes the schedule repeatable.")
@click.option("--scale", "scale", multiple=True, metavar="PROCESS:MIN-MAX",
              help="Mix scale operations of PROCESS (a count within MIN-MAX, inside its"
                   " scale: bounds) into the faults, half and half; repeatable.")
def drill(run, every, duration, worlds, sig, seed, scale):
    """A chaos loop against RUN (default: the newest live run).

    Measures each world's fault-free pace, then for --for seconds signals a member
    of a random world at random times (mean interval --every), only members in no
    other world, as kill-world does. With --scale, half of those moments are scale
    operations instead (a random count within MIN-MAX, followed until done, never
    waited for), and each fault picks among the members there are at its time. At
    the end (and in mwrun report), per world: its faults and their phases, downtime
    median and max, and the share of its own fault-free pace it kept; the scale
    operations and their phases; the calls that failed and the breaks in the worlds
    the drill did not fault. Ctrl-C ends the drill, never the job. Exit status 0 when
    every world came back after every fault, every scale operation was done and
    nothing failed outside the faulted worlds, 1 otherwise, 2 for bad usage.

    \b
    Examples:
      mwrun drill demo --every 5 --for 60 --worlds world1,world2 --seed 7
      mwrun drill serve --every 10 --for 600 --scale worker:1-8
    """
    from mwrun.cli import drilling

    sys.exit(drilling.start(run, every, duration, worlds, sig, seed, warn=warn,
                            say=lambda text: click.echo(text, nl=False), scale=scale))


@click.command()
@run_arg
@click.option("--no-wait", is_flag=True, help="Ask for the stop and return at once.")
@click.option("--force", is_flag=True,
              help="SIGKILL every process now, with no grace: what they were saving is lost.")
def stop(run, no_wait, force):
    """Stop RUN cleanly: SIGTERM, a grace period, then SIGKILL.

    With two or more live runs, name the one to stop. Asked again while the run is
    stopping, stop says how much of the grace is left and waits; only --force kills
    at once. A run whose head died is said to be lost: stop SIGKILLs what it left
    running on this machine, and says what that was.

    \b
    Examples:
      mwrun stop
      mwrun stop star-20261122-101500
      mwrun stop star-20261122-101500 --force
    """
    from mwrun import runs

    run_id, state = runs.find_sole(run, "mwrun stop RUN", warn=warn)
    if state["state"] == R.LOST:
        _end_lost(run_id, state)
        return
    require_live(run_id, state)
    reply = runs.ask(run_id, state, {"verb": "stop", "force": force}, say=warn)
    if reply.get("already") and not force:
        left = reply.get("grace_left")
        click.echo(f"run {run_id} is already stopping ("
                   + (f"{left:.0f}s of its grace left, then SIGKILL" if left is not None
                      else "its processes have had SIGKILL")
                   + f"); nothing more was sent. mwrun stop {run_id} --force SIGKILLs its"
                     " processes now.")
    elif force:
        click.echo(f"SIGKILL to every process of {run_id} now (--force)...")
    else:
        click.echo(f"stopping {run_id}...")
    if no_wait:
        return
    while True:
        state = runs.read_state(run_id) or state
        if state.get("state") in FINAL or not runs.supervisor_alive(state):
            break
        time.sleep(0.2)  # the state file is the other process's; nothing to block on
    click.echo(f"run {run_id} {state.get('state')}")


def _end_lost(run_id: str, state: dict) -> None:
    """A run whose head died: SIGKILL what it left running here, and say what."""
    from mwrun import runs

    click.echo(f"run {run_id} is lost: {state['lost']}")
    ended, stuck = runs.end_left_behind(state)
    if ended:
        click.echo(f"killed (SIGKILL) what it left running on this machine: {', '.join(ended)}")
    elif not stuck:
        click.echo("none of its processes is left on this machine; nothing to stop")
    remote = sorted({h["name"] for h in state.get("hosts") or ()
                     if h.get("state") == HostState.LOST})
    if remote:
        click.echo(f"the agents of {', '.join(remote)} end their processes themselves once"
                   " the head is gone")
    if stuck:
        raise RunError(f"still alive after SIGKILL: {', '.join(stuck)}")
