"""``mwrun drill``, its record kept: into the run's history, through the head while
the run lives, else appended by the drill itself, so that ``mwrun report`` shows
every drill."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mwrun import runs
from mwrun.errors import RunError
from mwrun.schema import HISTORY
from mwrun.schema import Event as E


def deliver(record: dict, problem: str | None, ask, control: str, run_id: str,
            run_dir: Path, clock) -> str | None:
    """The drill's record into the run's history: through the head, or, when the run
    ended under the drill (``problem``) or before it could be asked, appended by the
    drill itself, saying so (``run_ended``), so that the history and ``report`` hold
    every drill. The drill's problem then, if any."""
    if problem is not None:
        record["run_ended"] = problem
    try:
        ask(control, {"verb": "drill", "summary": record})
        return problem
    except RunError as exc:
        if runs.is_live(runs.read_state(run_id) or {}):
            return f"the summary was not recorded in the history: {exc}"
    record["run_ended"] = problem = problem or f"run {run_id} ended before the drill did"
    # No head writes there any more; one write, appended, is whole even beside a
    # head's last lines.
    line = json.dumps({"t": round(clock(), 4), "event": E.DRILL, **record}) + "\n"
    try:
        fd = os.open(run_dir / HISTORY, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        return f"{problem}; the summary was not recorded in the history: {exc}"
    return problem
