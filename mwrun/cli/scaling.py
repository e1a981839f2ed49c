"""``mwrun scale`` and ``mwrun drain``: change a running job's membership, and wait,
with a progress line, until the change is done (each replica's phases then, as
``schema.ScalePhase`` names them). The head does the work (head/elastic.py); this asks
it (``scale``/``drain``) and follows the operation (``op``) until it has ended.

Exit status: 0 when every change was made; 1 when one was not (named, with why); 2 when
the request was refused whole (bad usage: nothing was changed).
"""

from __future__ import annotations

import re
import sys
import time

import click

from mwrun import runs
from mwrun.cli.common import require_live, warn
from mwrun.errors import RunError, UsageError
from mwrun.schema import OpState
from mwrun.schema import ScalePhase as S
from mwrun.terminal import count

POLL = 0.02  # seconds between looks at the operation
# Seconds a done addition's first call is waited for: it comes up with the new
# replica's heartbeats, one a second while its calls move (worlds/beats.py).
FIRST_CALL_WAIT = 3.0
_CHANGE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*=[+-]?\d+$")


@click.command()
@click.argument("args", nargs=-1, required=True, metavar="[RUN] PROCESS=N...")
@click.option("--op", help="An id for this operation: asked again with the same id, it"
                           " changes nothing and says how it went.")
@click.option("--no-wait", is_flag=True, help="Ask, and return at once.")
def scale(args, op, no_wait):
    """Change how many replicas of a scaled process run, while the job runs.

    PROCESS=N sets the count, PROCESS=+K adds K, PROCESS=-K removes K, within the
    process's scale: {min, max}. New replicas take the lowest free indices, start
    warm where their host has room and join their worlds (the others in them are
    told); removed ones (the highest indices) are drained: their worlds keep
    working until released or drain_timeout, then close, and the replica is
    stopped; nothing counts as a fault. Waits until done, showing progress, then
    prints each replica's phases. Exit status 0 when every change was made, 1 when
    one was not, 2 when nothing was changed (a bad request).

    \b
    Examples:
      mwrun scale worker=6
      mwrun scale worker=+2 --op grow-1
      mwrun scale serve-20261125-101500 worker=-1
    """
    run, changes = _split(args, lambda arg: bool(_CHANGE.match(arg)))
    for change in changes:
        if not _CHANGE.match(change):
            raise click.BadParameter(f"{change!r}: write PROCESS=N, PROCESS=+K or PROCESS=-K"
                                     " (a process with 'scale:' in the topology, like"
                                     " worker=4)", param_hint="PROCESS=N")
    _ask(run, {"verb": "scale", "changes": changes, "op": op}, no_wait)


@click.command()
@click.argument("args", nargs=-1, required=True, metavar="[RUN] PROCESS-I...")
@click.option("--op", help="An id for this operation: asked again with the same id, it"
                           " changes nothing and says how it went.")
@click.option("--no-wait", is_flag=True, help="Ask, and return at once.")
def drain(args, op, no_wait):
    """Retire the named replicas of a scaled process, while the job runs.

    Each replica's worlds turn draining (every member is told; calls keep working
    until a member releases the world or drain_timeout passes), then close; the
    replica gets SIGTERM, a grace period, SIGKILL. It is not restarted and nothing
    counts as a fault. Waits until each has exited, showing progress.

    \b
    Examples:
      mwrun drain worker-2
      mwrun drain serve-20261125-101500 worker-0 worker-3
    """
    run, replicas = _split(args, lambda arg: not runs.RUN_ID.match(arg) or
                           not runs.run_path(arg).is_dir())
    _ask(run, {"verb": "drain", "replicas": replicas, "op": op}, no_wait)


def _split(args: tuple[str, ...], is_item) -> tuple[str | None, list[str]]:
    """[RUN] ITEM...: a first argument that is no item names the run."""
    if len(args) > 1 and not is_item(args[0]):
        return args[0], list(args[1:])
    if not is_item(args[0]) and len(args) == 1 and runs.RUN_ID.match(args[0]) \
            and runs.run_path(args[0]).is_dir():
        raise click.UsageError(f"{args[0]} is a run; say what to change in it")
    return None, list(args)


def _ask(run: str | None, message: dict, no_wait: bool) -> None:
    run_id, state = runs.find(run, warn=warn)
    state = require_live(run_id, state)
    path = state["control"]
    reply = runs.ask(run_id, state, {k: v for k, v in message.items() if v is not None},
                     check=False, say=warn)
    if not reply.get("ok"):
        error = reply.get("error", "the supervisor refused")
        raise UsageError(error) if reply.get("refused") else RunError(error)
    if reply.get("repeated"):
        click.echo(f"{reply['op']} was asked already ({reply['request']}); nothing more"
                   " was changed")
    elif not reply["changes"]:
        click.echo(f"{reply['op']}: {reply['request']}: nothing to change")
        return
    else:
        click.echo(f"{reply['op']}: {reply['request']} (revision {reply['revision']}):"
                   f" {_plan_line(reply['changes'])}")
    if no_wait:
        click.echo(f"not waiting; follow it with mwrun status {run_id}")
        return
    sys.exit(_follow(path, reply))


def _plan_line(changes: list[dict]) -> str:
    adds = [c["process"] for c in changes if c["change"] == "add"]
    removes = [c["process"] for c in changes if c["change"] == "remove"]
    parts = ([f"adding {', '.join(adds)}"] if adds else []) + \
        ([f"draining {', '.join(removes)}"] if removes else [])
    return "; ".join(parts)


def _follow(path: str, reply: dict) -> int:
    """Until the operation has ended: a progress line on a terminal, then each
    replica's phases. The exit status."""
    tty = sys.stderr.isatty()
    began, shown = time.monotonic(), ""
    ended_at: float | None = None
    try:
        while reply["state"] == OpState.RUNNING or _awaits_first_call(reply, ended_at):
            if ended_at is None and reply["state"] != OpState.RUNNING:
                ended_at = time.monotonic()
            line = _progress(reply["changes"], time.monotonic() - began)
            if tty and line != shown:
                click.echo(f"\r\033[K{line}", nl=False, err=True)
                shown = line
            time.sleep(POLL)  # another process's work; the op verb is cheap to ask
            reply = runs.request(path, {"verb": "op", "op": reply["op"]})
    except KeyboardInterrupt:
        if tty:
            click.echo("\r\033[K", nl=False, err=True)
        click.echo(f"stopped waiting; {reply['op']} goes on (mwrun status shows it)")
        return 130
    if tty and shown:
        click.echo("\r\033[K", nl=False, err=True)
    for change in reply["changes"]:
        click.echo("  " + phases_line(change))
    failed = [c for c in reply["changes"] if c["outcome"] != "done"]
    took = _took(reply["changes"])
    if failed:
        click.echo(f"{reply['op']}: {count(len(failed), 'change')} not made:", err=True)
        for change in failed:
            click.echo(f"  {change['process']}: {change['outcome']}: {change['error']}",
                       err=True)
        return 1
    click.echo(f"{reply['op']} done in {took:.2f}s")
    return 0


def _awaits_first_call(reply: dict, ended_at: float | None) -> bool:
    """Whether to look again for a done addition's first call: the head still waits
    for it, and it has had less than FIRST_CALL_WAIT since the operation ended."""
    return any(c.get("awaits_first_call") for c in reply["changes"]) and (
        ended_at is None or time.monotonic() - ended_at < FIRST_CALL_WAIT)


def _took(changes: list[dict]) -> float:
    """From the request to the last phase any change reached (its first call aside:
    that comes with the traffic, not with the change)."""
    ends = [t for c in changes for p, t in c["phases"].items()
            if t is not None and p != S.FIRST_CALL.value]
    starts = [c["phases"][S.REQUESTED.value] for c in changes]
    return max(ends, default=0.0) - min(starts, default=0.0)


def _progress(changes: list[dict], waited: float) -> str:
    """'worker-2 formed, worker-3 started (0.4s)'."""
    parts = []
    for change in changes:
        phases = change["phases"]
        reached = [p for p in S if phases.get(p.value) is not None]
        last = reached[-1].value if reached else "asked"
        if change.get("awaits_first_call"):
            last += ", waiting for its first call"
        parts.append(f"{change['process']} {last}")
    return f"{', '.join(parts)} ({waited:.1f}s)"


def phases_line(change: dict) -> str:
    """'worker-2  add     started +52 ms, formed +88 ms, told +95 ms, first_call +140 ms';
    a first call the head still waits for reads 'first_call pending' (mwrun report
    shows it once it came), one it gave up on 'first_call -'."""
    phases = change["phases"]
    at = phases.get(S.REQUESTED.value)
    shown = []
    for phase in S:
        if phase is S.REQUESTED or phase.value not in phases:
            continue
        t = phases[phase.value]
        none = "pending" if phase is S.FIRST_CALL and change.get("awaits_first_call") \
            else "-"
        shown.append(f"{phase.value} " + (none if t is None or at is None
                                          else f"+{(t - at) * 1000:.0f} ms"))
    return f"{change['process']:<12} {change['change']:<7} {', '.join(shown)}"
