"""The run folder: $MWRUN_HOME/runs/RUN_ID/ with the topology, plan, state and logs.

``state.json`` is replaced atomically (write, then rename), so a reader never sees
half a document; it is kept current while the run lives and final after it ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import time
from pathlib import Path

import psutil

from mwrun.errors import RunError, UsageError

RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
FINAL = ("finished", "failed")
# sun_path holds 108 bytes; deep $MWRUN_HOME folders (test temp dirs) go past that.
_SUN_PATH_MAX = 100


def home() -> Path:
    return Path(os.environ.get("MWRUN_HOME") or Path.home() / ".mwrun")


def runs_root() -> Path:
    return home() / "runs"


def new_run_id(name: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{name}-{stamp}"


def run_path(run_id: str) -> Path:
    return runs_root() / run_id


def control_path(run_id: str) -> Path:
    """The control socket: in the run folder, or under /tmp when that path is too long."""
    path = run_path(run_id) / "control.sock"
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        return path
    digest = hashlib.sha1(os.fsencode(path)).hexdigest()[:20]
    return Path(f"/tmp/mwrun-{os.getuid()}") / f"{digest}.sock"


def private_folder(path: str | os.PathLike) -> Path:
    """Make ``path`` (mode 0700), or check that it is ours alone; RunError if not.

    The control socket's folder decides who can move the socket aside and answer in
    the supervisor's place: one another user made (or can write to, or that is a
    link) is refused rather than used.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
        os.chmod(path, 0o700)  # whatever the umask left
    info = os.lstat(path)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and mode == 0o700:
        return path
    what = "a link" if stat.S_ISLNK(info.st_mode) else \
        f"owned by uid {info.st_uid} with mode {mode:04o}"
    raise RunError(f"{path} is {what}; mwrun keeps control sockets only in a folder that is"
                   f" yours alone (uid {os.getuid()}, mode 0700): remove it, or set"
                   " MWRUN_HOME to a shorter path")


def create(run_id: str) -> Path:
    """Make the folder of a new run; a run id is used once."""
    if not RUN_ID.match(run_id):
        raise UsageError(f"run id {run_id!r}: use letters, digits, '_', '.', '-' (at most 100)")
    path = run_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        raise UsageError(f"run {run_id!r} exists already ({path}); choose another --run-id"
                         " or leave it out") from None
    (path / "logs").mkdir(mode=0o700)
    return path


def write_json(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def read_state(run_id: str) -> dict | None:
    try:
        return json.loads((run_path(run_id) / "state.json").read_text())
    except (OSError, ValueError):
        return None


def supervisor_alive(state: dict) -> bool:
    pid = state.get("supervisor_pid")
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and \
            proc.create_time() <= state.get("started_at", time.time()) + 1
    except psutil.Error:
        return False


def is_live(state: dict) -> bool:
    return state.get("state") not in FINAL and supervisor_alive(state)


def all_runs() -> list[tuple[str, dict]]:
    """(run id, state) of every run with a state file, newest first."""
    runs = []
    with contextlib.suppress(OSError):
        for entry in runs_root().iterdir():
            state = read_state(entry.name)
            if state is not None:
                runs.append((entry.name, state))
    return sorted(runs, key=lambda r: r[1].get("started_at", 0), reverse=True)


def find(run_id: str | None) -> tuple[str, dict]:
    """The run named, or the newest live one; RunError with what exists otherwise."""
    if run_id is not None:
        state = read_state(run_id)
        if state is None:
            if run_path(run_id).is_dir():
                raise RunError(f"run {run_id!r} has no state yet (is it still starting?)")
            raise RunError(f"no run {run_id!r} under {runs_root()}" + _recent_hint())
        return run_id, state
    for found, state in all_runs():
        if is_live(state):
            return found, state
    raise RunError("no live run" + _recent_hint())


def _recent_hint() -> str:
    runs = all_runs()[:3]
    if not runs:
        return f"; none at all under {runs_root()}"
    listed = ", ".join(f"{r} ({s.get('state', '?')})" for r, s in runs)
    return f"; recent runs: {listed}"
