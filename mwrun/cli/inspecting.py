"""``mwrun stacks``: what every member of a live job is doing now, asked of each one's
library through its supervisor (head/stacks.py), printed by ``stacksview``."""

from __future__ import annotations

import json

import click

from mwrun import stacktext
from mwrun.cli import stacksview
from mwrun.cli.common import require_live, warn


@click.command()
@click.argument("args", nargs=-1, metavar="[RUN] [PROCESS]...")
@click.option("--world", help="Every member of this world (instead of PROCESS...).")
@click.option("--json", "as_json", is_flag=True, help="The members and stacks as JSON.")
def stacks(args, world, as_json):
    """What the members of a live run are doing now: each one's Python stacks.

    Asks the mwrun library inside each member (PROCESS..., the members of --world,
    or every process) from its own link thread: nobody is stopped or signalled,
    and the main thread is never interrupted. Prints per member its name, pid,
    host and the world call it is in (and for how long), then every thread's
    stack, innermost frame last. A member that cannot answer is named with the
    reason: not running, no library (a plain torch script), or no answer within
    2 s (stopped, or a thread holding the GIL). Exit status 0 once asked (even if
    some did not answer), 1 when the run is not live or a name is unknown.

    \b
    Examples:
      mwrun stacks                       # every process of the newest live run
      mwrun stacks --world world1
      mwrun stacks star-20261125-101500 worker-0 worker-1
      mwrun stacks leader --json
    """
    from mwrun import runs
    from mwrun.errors import UsageError

    run, names = stacksview.split(args, lambda a: bool(runs.RUN_ID.match(a))
                                      and runs.run_path(a).is_dir())
    if world is not None and names:
        raise UsageError("name either --world or processes, not both")
    run_id, state = runs.find(run, warn=warn)
    state = require_live(run_id, state)
    message: dict = {"verb": "stacks", "processes": names}
    if world is not None:
        message = {"verb": "stacks", "world": world}
    answer = stacksview.collect(lambda m: runs.ask(run_id, state, m, say=warn), message)
    members = stacksview.settled(answer)
    if as_json:
        click.echo(json.dumps({"run_id": run_id, "deadline_s": stacksview.DEADLINE,
                               "members": members}, indent=1))
    else:
        click.echo(stacktext.render(members), nl=False)
