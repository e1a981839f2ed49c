"""What the commands share: their arguments, the seconds type, how they warn, and the
check that a run is live."""

from __future__ import annotations

import click

from mwrun.errors import RunError


class Seconds(click.ParamType):
    """A finite, non-negative number of seconds (``nan`` and ``inf`` would never
    escalate to SIGKILL)."""

    name = "seconds"

    def convert(self, value, param, ctx):
        import math

        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(number) or number < 0:
            self.fail(f"{value!r} must be a finite number of seconds, 0 or more", param, ctx)
        return number


SECONDS = Seconds()
topology_arg = click.argument("topology", type=click.Path(dir_okay=False, path_type=str))
run_arg = click.argument("run", required=False)


def warn(text: str) -> None:
    click.echo(f"mwrun: {text}", err=True)


def require_live(run_id: str, state: dict) -> dict:
    """The run's state, once it has a head that runs it (one that is away is waited for
    a while: runs.until_head); RunError saying why not."""
    from mwrun import runs

    state = runs.until_head(run_id, state, warn)
    if not runs.is_live(state):
        raise RunError(f"run {run_id} is not running (it is {state.get('state')});"
                       " see mwrun status " + run_id)
    return state
