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
import time
from pathlib import Path

import psutil

from mwrun.errors import RunError, UsageError
from mwrun.head import statecheck
from mwrun.host.sockets import private_folder  # noqa: F401 - the run folder's too

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


def create(run_id: str | None, name: str = "run") -> Path:
    """Make the folder of a new run and return it (its name is the run id).

    A RUN_ID given is used once. Without one the id is NAME-YYYYMMDD-HHMMSS, with -2,
    -3... when another launch took that second: the folder is the reservation, made
    atomically, so two launches never share one.
    """
    if run_id is not None and not RUN_ID.match(run_id):
        raise UsageError(f"run id {run_id!r}: use letters, digits, '_', '.', '-' (at most 100)")
    try:
        runs_root().mkdir(parents=True, exist_ok=True, mode=0o700)
        path = _reserve(run_id, name)
    except PermissionError as exc:
        raise RunError(f"cannot make a run folder under {runs_root()}: {exc.strerror}"
                       " (set MWRUN_HOME to a folder of yours)") from None
    # Written before anything else can fail or be interrupted: a folder without a
    # state would look like a run that is still starting, for ever.
    try:
        write_json(path / "state.json", initial_state(path.name, name))
        (path / "logs").mkdir(mode=0o700)
    except BaseException as exc:  # Ctrl-C right now included
        write_json(path / "state.json", {**initial_state(path.name, name), "state": "failed",
                                         "exit_code": 130 if isinstance(exc, KeyboardInterrupt)
                                         else 1})
        raise
    return path


def _reserve(run_id: str | None, name: str) -> Path:
    if run_id is not None:
        path = run_path(run_id)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            raise UsageError(f"run {run_id!r} exists already ({path}); choose another"
                             " --run-id or leave it out") from None
        return path
    base = new_run_id(name)
    for attempt in range(1, 1000):
        path = run_path(base if attempt == 1 else f"{base}-{attempt}")
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue
    raise RunError(f"more than 999 runs named {base}; wait a second")


def initial_state(run_id: str, name: str) -> dict:
    """The state of a run whose supervisor has not started a process yet."""
    return {"run_id": run_id, "name": name, "state": "starting", "supervisor_pid": os.getpid(),
            "started_at": time.time(), "control": str(control_path(run_id)),
            "exit_code": None, "processes": [], "worlds": []}


def end_unstarted(path: Path, exit_code: int) -> None:
    """Mark a run that ended before it started any process as failed (if it is still
    the initial state: a supervisor that ran has written its own last word)."""
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads((path / "state.json").read_text())
        if doc.get("state") == "starting" and not doc.get("processes"):
            write_json(path / "state.json", {**doc, "state": "failed", "exit_code": exit_code})


def write_json(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # Compact: at 1,000 processes an indented state.json was 0.9 MB per write.
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def read_state(run_id: str) -> dict | None:
    """The run's state, or None if it cannot be had (use load_state to learn why)."""
    try:
        return load_state(run_id)
    except RunError:
        return None


def load_state(run_id: str) -> dict:
    """The run's state; RunError saying why not (missing, unreadable, damaged)."""
    path = run_path(run_id) / "state.json"
    try:
        text = path.read_text()
    except FileNotFoundError:
        if run_path(run_id).is_dir():
            raise RunError(f"run {run_id!r} has no state.json ({path.parent});"
                           " it never started") from None
        raise RunError(f"no run {run_id!r} under {runs_root()}" + _recent_hint()) from None
    except PermissionError as exc:
        raise RunError(f"run {run_id!r}: cannot read {path}: {exc.strerror}"
                       " (another user's run?)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"run {run_id!r}: cannot read {path}: {exc}") from None
    try:
        doc = json.loads(text)
    except ValueError:
        raise RunError(f"run {run_id!r}: its state.json is damaged (not complete JSON);"
                       " the run is not running: no supervisor keeps it") from None
    found = statecheck.problem(doc)
    if found:
        raise RunError(f"run {run_id!r}: its state.json is damaged ({found})")
    return doc


def recent_events(run_id: str, count: int = 6) -> list[str]:
    """The last ``count`` lines of the run's events.log ("HH:MM:SS what happened"),
    oldest first: the order they happened in."""
    try:
        with open(run_path(run_id) / "events.log", "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(log.tell() - 16384, 0))
            lines = log.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    return lines[-count:] if count else []


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
    return state.get("state") not in FINAL and "control" in state and supervisor_alive(state)


def scan() -> tuple[list[tuple[str, dict]], list[tuple[str, float, str]]]:
    """Every run: (run id, state) of the readable ones, newest first, and (run id,
    folder time, why) of those whose state cannot be used."""
    runs, damaged = [], []
    with contextlib.suppress(OSError):
        for entry in runs_root().iterdir():
            try:
                runs.append((entry.name, load_state(entry.name)))
            except RunError as exc:
                with contextlib.suppress(OSError):
                    damaged.append((entry.name, entry.stat().st_mtime, str(exc)))
    runs.sort(key=lambda r: r[1]["started_at"], reverse=True)
    return runs, damaged


def all_runs() -> list[tuple[str, dict]]:
    """(run id, state) of every run with a usable state file, newest first."""
    return scan()[0]


def find(run_id: str | None, live_only: bool = True, warn=None) -> tuple[str, dict]:
    """The run named, or else the newest run (the newest live one with ``live_only``).

    Raises RunError with what exists when there is none. Runs whose state is damaged
    are skipped; ``warn(text)`` is told of each one newer than the run found.
    """
    if run_id is not None:
        return run_id, load_state(run_id)
    runs, damaged = scan()
    found = next(((r, s) for r, s in runs if not live_only or is_live(s)), None)
    since = found[1]["started_at"] if found else 0.0
    for _, mtime, why in sorted(damaged, key=lambda d: d[1]):
        if warn is not None and mtime >= since:
            warn(f"skipped: {why}")
    if found is None:
        raise RunError(("no live run" if live_only else "no run") + _recent_hint(runs))
    return found


def _recent_hint(runs=None) -> str:
    runs = (all_runs() if runs is None else runs)[:3]
    if not runs:
        return f"; none at all under {runs_root()}"
    listed = ", ".join(f"{r} ({s.get('state', '?')})" for r, s in runs)
    return f"; recent runs: {listed}"
