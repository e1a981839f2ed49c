"""The run folder: $MWRUN_HOME/runs/RUN_ID/ with the topology, plan, state and logs."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def home() -> Path:
    return Path(os.environ.get("MWRUN_HOME") or Path.home() / ".mwrun")


def runs_root() -> Path:
    return home() / "runs"


def new_run_id(name: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{name}-{stamp}"


def run_path(run_id: str) -> Path:
    return runs_root() / run_id


# sun_path holds 108 bytes; deep $MWRUN_HOME folders (test temp dirs) go past that.
_SUN_PATH_MAX = 100


def control_path(run_id: str) -> Path:
    """The control socket: in the run folder, or under /tmp when that path is too long."""
    path = run_path(run_id) / "control.sock"
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        return path
    import hashlib

    digest = hashlib.sha1(os.fsencode(path)).hexdigest()[:20]
    return Path(f"/tmp/mwrun-{os.getuid()}") / f"{digest}.sock"
