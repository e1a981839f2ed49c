"""The run folder written: $MWRUN_HOME/runs/RUN_ID/ with the topology, plan, state and
logs (names in ``mwrun.schema``; reading it back is ``mwrun.runs``, re-exported here).

``state.json`` is replaced atomically (write, then rename), so a reader never sees
half a document; it is kept current while the run lives and final after it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

from mwrun.errors import RunError, UsageError
from mwrun.host.sockets import private_folder  # noqa: F401 - the run folder's too
from mwrun.runs import (  # noqa: F401 - the reader's names, for the head
    FINAL,
    RUN_ID,
    all_runs,
    control_path,
    find,
    home,
    is_live,
    load_state,
    new_run_id,
    read_state,
    recent_events,
    run_path,
    runs_root,
    scan,
    supervisor_alive,
)
from mwrun.schema import AGENTS, LOGS, STATE
from mwrun.schema import RunState as R


def create(run_id: str | None, name: str = "run") -> Path:
    """Make the folder of a new run and return it (its name is the run id).

    A RUN_ID given is used once. Without one the id is NAME-YYYYMMDD-HHMMSS, with -2,
    -3... when another launch took that second: the folder is the reservation, made
    atomically, so two launches never share one.
    """
    if run_id is not None and not RUN_ID.match(run_id):
        raise UsageError(f"run id {run_id!r}: use letters, digits, '_', '.', '-' (at most 100)")
    # The folder and its first state are made with Ctrl-C held back: a folder without a
    # state would look like a run that never started, whose folder no one owns (a
    # Ctrl-C landing just after the mkdir once left one, CI pair 16).
    with _held_interrupt() as interrupted:
        try:
            runs_root().mkdir(parents=True, exist_ok=True, mode=0o700)
            path = _reserve(run_id, name)
        except PermissionError as exc:
            raise RunError(f"cannot make a run folder under {runs_root()}: {exc.strerror}"
                           " (set MWRUN_HOME to a folder of yours)") from None
        write_json(path / STATE, initial_state(path.name, name))
    try:
        if interrupted:
            raise KeyboardInterrupt
        (path / LOGS).mkdir(mode=0o700)
    except BaseException as exc:  # Ctrl-C right now included
        write_json(path / STATE, {**initial_state(path.name, name), "state": R.FAILED.value,
                                  "exit_code": 130 if isinstance(exc, KeyboardInterrupt)
                                  else 1})
        raise
    return path


@contextlib.contextmanager
def _held_interrupt():
    """Ctrl-C (SIGINT) during the block is held back, and said in the list it yields
    (for the caller to raise). Only the main thread can hold it; others never get it."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    got: list[bool] = []
    before = signal.signal(signal.SIGINT, lambda *_: got.append(True))
    try:
        yield got
    finally:
        signal.signal(signal.SIGINT, before)


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
    return {"run_id": run_id, "name": name, "state": R.STARTING.value,
            "supervisor_pid": os.getpid(),
            "started_at": time.time(), "control": str(control_path(run_id)),
            "exit_code": None, "processes": [], "worlds": []}


def end_unstarted(path: Path, exit_code: int) -> None:
    """Mark a run that ended before it started any process as failed (if it is still
    the initial state: a supervisor that ran has written its own last word)."""
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads((path / STATE).read_text())
        if doc.get("state") == R.STARTING and not doc.get("processes"):
            write_json(path / STATE, {**doc, "state": R.FAILED.value, "exit_code": exit_code})


def agent_entry(hello: dict) -> dict:
    """What AGENTS keeps of an agent (its hello): its door's socket and pid, and under
    Slurm its node and job (a new head runs srun there, head/hosts/doors.py)."""
    return {"control": hello.get("control"), "pid": hello.get("pid"),
            **{k: hello[k] for k in ("node", "jobid") if hello.get(k)}}


def note_agent(run_dir: Path, host: str, hello: dict) -> None:
    """``host``'s agent, as the head reached it (at launch, or again after a loss), in
    the run folder's AGENTS: where a new head finds it (head/adopting.py)."""
    path = Path(run_dir) / AGENTS
    try:
        told = json.loads(path.read_text())
    except (OSError, ValueError):
        told = {}
    entry = agent_entry(hello)
    if isinstance(told, dict) and told.get(host) != entry:
        with contextlib.suppress(OSError):  # (a full disk: the job goes on)
            write_json(path, {**told, host: entry})


def write_json(path: Path, data) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # Compact: at 1,000 processes an indented state.json was 0.9 MB per write.
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(tmp, path)
