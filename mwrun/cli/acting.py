"""The verbs that act on a live run through its supervisor: break a world on purpose
(``kill-world``), a chaos loop of such faults (``drill``), and ``stop``. Each is a thin
click command; ``commands`` adds them to the ``mwrun`` group."""

from __future__ import annotations

import sys
import time

import click

from mwrun import protocol
from mwrun.cli.common import require_live, run_arg, warn
from mwrun.errors import RunError
from mwrun.schema import FINAL, HostState
from mwrun.schema import RunState as R


@click.command("kill-world")
@click.argument("world")
@run_arg
@click.option("--rank", type=int, help="Signal exactly this rank of WORLD.")
@click.option("--signal", "sig", default="KILL", show_default=True,
              help="Signal name or number: KILL for a crash, STOP for a hang, TERM...;"
                   " SLOW makes one member late to every call (no fault).")
@click.option("--delay", type=float, default=protocol.LATE_DELAY, show_default=True,
              help="With --signal SLOW: seconds late to each call.")
@click.option("--for", "hold", type=float, default=protocol.LATE_FOR, show_default=True,
              help="With --signal SLOW: for how many seconds.")
def kill_world(world, run, rank, sig, delay, hold):
    """Fault drill: break WORLD by signalling its members that are in no other world.

    Members shared with other worlds survive and see WORLD break; restart policies
    then apply. With --rank, exactly that rank is signalled. --signal SLOW breaks
    nothing: one member (--rank, else the last of WORLD's own members) comes --delay
    seconds late to each of its calls in WORLD for --for seconds, so the member its
    peers wait for can be drilled (mwrun status names it, job.events() says slow).

    \b
    Examples:
      mwrun kill-world world1
      mwrun kill-world world1 --signal STOP      # a hang: declared hung after the timeout
      mwrun kill-world world2 --rank 0 --signal TERM
      mwrun kill-world world1 --signal SLOW --delay 0.05 --for 60
    """
    from mwrun import runs

    slow = sig.upper().removeprefix("SIG") == protocol.SLOW
    if slow and (problem := late_problem(delay, hold)) is not None:
        raise click.BadParameter(problem[1], param_hint=problem[0])
    try:
        if not slow:
            runs.signal_number(sig)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--signal") from None
    run_id, state = runs.find_sole(run, f"mwrun kill-world {world} RUN", warn=warn)
    state = require_live(run_id, state)
    request = {"verb": "kill_world", "world": world, "rank": rank, "signal": sig}
    if slow:
        request.update({"signal": protocol.SLOW, "delay": delay, "for": hold})
    reply = runs.ask(run_id, state, request, say=warn)
    if slow:
        [hit] = reply["signalled"]
        click.echo(f"made {hit['process']} (pid {hit['pid']}, rank {hit['rank']} of {world})"
                   f" {delay * 1000:g} ms late to every call for {hold:g}s")
        return
    for hit in reply["signalled"]:
        click.echo(f"sent SIG{sig.upper().removeprefix('SIG')} to {hit['process']}"
                   f" (pid {hit['pid']}, rank {hit['rank']} of {world})")


def late_problem(delay: float, hold: float) -> tuple[str, str] | None:
    """(option, what is wrong) of --delay and --for of a SLOW drill; None if right."""
    if not 0 < delay <= protocol.MAX_LATE_DELAY:
        return "--delay", (f"seconds late to each call: more than 0 and at most"
                           f" {protocol.MAX_LATE_DELAY:g}, not {delay:g}")
    if not 0 < hold <= protocol.MAX_LATE_FOR:
        return "--for", (f"seconds of lateness: more than 0 and at most"
                         f" {protocol.MAX_LATE_FOR:g}, not {hold:g}")
    return None


@click.command()
@run_arg
@click.option("--every", required=True, help="Mean seconds between faults.")
@click.option("--for", "duration", required=True, help="Seconds of drill.")
@click.option("--worlds", help="Comma-separated worlds to fault (default: every world).")
@click.option("--signal", "sig", default="KILL", show_default=True,
              help="KILL (a crash), TERM, SEGV, STOP (a hang), or SLOW (a late member).")
@click.option("--delay", type=float, default=None,
              help=f"With --signal SLOW: seconds late to each call (default"
                   f" {protocol.LATE_DELAY:g}).")
@click.option("--seed", type=int, help="Makes the schedule repeatable.")
@click.option("--scale", "scale", multiple=True, metavar="PROCESS:MIN-MAX",
              help="Mix scale operations of PROCESS (a count within MIN-MAX, inside its"
                   " scale: bounds) into the faults, half and half; repeatable.")
@click.option("--head", metavar="SECONDS", default=None,
              help="Also SIGKILL the run's head, at random times (mean SECONDS apart); its"
                   " topology needs head_grace (a new head takes the run back each time).")
def drill(run, every, duration, worlds, sig, seed, scale, delay, head):
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

    With --head, the head itself is killed now and then (never in its first 12 s):
    the job must not notice; the summary says how long the run was without a head.

    --signal SLOW breaks nothing: at each moment one member comes --delay seconds
    late to every call of its world until mwrun names it the slow member (at most
    30 s), once its world waits for no member; the summary says how fast each was
    named. Exit status 0 when every one was named, and no other member was.

    \b
    Examples:
      mwrun drill demo --every 5 --for 60 --worlds world1,world2 --seed 7
      mwrun drill serve --every 10 --for 600 --scale worker:1-8
      mwrun drill serve --every 10 --for 300 --head 60
      mwrun drill train --every 5 --for 300 --signal SLOW --delay 0.02
    """
    from mwrun.cli import drillstart

    sys.exit(drillstart.start(run, every, duration, worlds, sig, seed, warn=warn,
                              say=lambda text: click.echo(text, nl=False), scale=scale,
                              delay=delay, head=head))


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
    if runs.is_away(state):
        _end_away(run_id, state)
        return
    state = require_live(run_id, state)
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


def _end_away(run_id: str, state: dict) -> None:
    """A run going on while its head is away: its machine's agent is told to end
    (SIGTERM), which ends every process there and the worlds' stores, as a stop does."""
    from mwrun import runs

    click.echo(f"run {run_id}'s head is away ({state['head'].get('why')}); telling this"
               " machine's agent to end everything here...")
    left = runs.end_away(run_id)
    if left:
        raise RunError(f"this machine's agent (pid {left}) is still there after"
                       f" {runs.AWAY_END_WAIT:g}s; mwrun stop {run_id} again, or kill it")
    click.echo(f"stopped: every process of {run_id} on this machine has ended")
    remote = sorted({h["name"] for h in state.get("hosts") or ()
                     if h.get("state") != HostState.LOCAL})
    if remote:
        click.echo(f"the agents of {', '.join(remote)} end their processes themselves once"
                   " head_grace has run out")


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
