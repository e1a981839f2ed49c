"""A run folder read back, and its supervisor asked: what the command line needs, with
no import of the head (so ``mwrun status``, ``logs``, ``report``, ``kill-world`` and
``stop`` stay light). The head writes the folder (mwrun/head/observe/rundir.py) and serves the
control socket (mwrun/head/serve/control.py) with the same names, from ``mwrun.schema``.

``state.json`` is replaced atomically by its writer, so a reader never sees half a
document; what is read is checked (``problem``) before it is used: run folders outlive
the processes that wrote them (a disk filled up, a hand edited one, an older mwrun
wrote it), and a damaged one is named and skipped rather than crashing a command.

May import: ``mwrun.errors``, ``mwrun.schema``, psutil. Never torch or the head.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from mwrun import schema
from mwrun.errors import NotListening, RunError
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W

RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
FINAL = schema.FINAL
_EXPECTED = tuple(s.value for s in P if s.expected)  # alive, or about to be again
# sun_path holds 108 bytes; deep $MWRUN_HOME folders (test temp dirs) go past that.
_SUN_PATH_MAX = 100


def home() -> Path:
    return Path(os.environ.get("MWRUN_HOME") or Path.home() / ".mwrun")


def runs_root() -> Path:
    return home() / schema.RUNS


def new_run_id(name: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{name}-{stamp}"


def run_path(run_id: str) -> Path:
    return runs_root() / run_id


def control_path(run_id: str) -> Path:
    """The control socket: in the run folder, or under /tmp when that path is too long."""
    return socket_path(run_id, schema.CONTROL)


def socket_path(run_id: str, name: str) -> Path:
    """A socket of the run's: in the run folder, or under /tmp when that path is too
    long for a socket's address."""
    return _socket_in(run_path(run_id), name)


def _socket_in(folder: Path, name: str) -> Path:
    path = folder / name
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        return path
    digest = hashlib.sha1(os.fsencode(path)).hexdigest()[:20]
    return Path(f"/tmp/mwrun-{os.getuid()}") / f"{digest}.sock"


def forget_sockets(folder: Path) -> None:
    """The sockets of the run in ``folder`` that lie outside it (under /tmp: its path
    was too long), removed: a head that was killed could not (its control socket, its
    keeper's door)."""
    for name in (schema.CONTROL, schema.KEEPER_SOCK, schema.KEEPER_DOOR):
        path = _socket_in(folder, name)
        if not path.is_relative_to(folder):
            with contextlib.suppress(OSError):
                path.unlink()


def read_state(run_id: str) -> dict | None:
    """The run's state, or None if it cannot be had (use load_state to learn why)."""
    try:
        return load_state(run_id)
    except RunError:
        return None


def load_state(run_id: str) -> dict:
    """The run's state as it is now; RunError saying why not (missing, unreadable,
    damaged). A run whose head is gone without ending it reads as LOST (``lost``)."""
    doc = _load(run_id)
    if doc["state"] in FINAL or supervisor_alive(doc):
        return doc
    # The head writes its last word, then exits: read again, once it is surely gone,
    # so that a run that ended between the read and the look is not called lost.
    doc = _load(run_id)
    if doc["state"] in FINAL:
        return doc
    note = head_away(run_id)
    if note is not None and note.get("stopped") is None \
            and _same_process(note.get("agent_pid"), note.get("since")):
        return away(doc, note)  # its agents keep the job going: unsupervised a while
    return lost(doc, why=None if note is None else note.get("reason"))


def away(doc: dict, note: dict) -> dict:
    """The document of a run whose head died while its agents keep it going (``note``:
    ``head_away``): the head's last word, and the ``head`` that says it is away."""
    return {**doc, "head": {"state": schema.HeadState.AWAY.value, "since": note["since"],
                            "grace_s": note.get("grace"), "why": note.get("why")}}


def adopting(doc: dict, epoch: int, pid: int, since: float) -> dict:
    """The document a new head writes while it takes the run back (mwrun adopt): the
    last head's last word, its own pid, and the ``head`` that says it is adopting."""
    return {**{k: v for k, v in doc.items() if k != "head"}, "supervisor_pid": pid,
            "supervisor_started_at": since, "epoch": epoch,
            "head": {"state": schema.HeadState.ADOPTING.value, "since": since,
                     "epoch": epoch}}


def head_away(run_id: str) -> dict | None:
    """What the agent of the head's machine wrote once the head went (host/absence.py):
    since when (``since``), for how long at most (``grace``), why; ``stopped`` once no
    head came back in time. None when the head never went (or the note is unreadable)."""
    try:
        note = json.loads((run_path(run_id) / schema.HEAD_AWAY).read_text())
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) and isinstance(note.get("since"), int | float) \
        else None


AWAY_END_WAIT = 10.0  # seconds for the agent told to end to end (it ends within a turn)


def end_away(run_id: str, clock=time.monotonic, sleep=time.sleep) -> int | None:
    """SIGTERM to the agent that keeps a run going on the head's machine while its
    head is away (it ends every process there and the stores, as the head's stop
    does); None once it has ended, else its pid (still there after AWAY_END_WAIT)."""
    note = head_away(run_id) or {}
    pid = note.get("agent_pid")
    if not isinstance(pid, int) or not _same_process(pid, note.get("since")):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = clock() + AWAY_END_WAIT
    while _same_process(pid, note.get("since")) and clock() < deadline:
        sleep(0.05)  # another process's end; nothing to wait on
    return pid if _same_process(pid, note.get("since")) else None


def away_error(run_id: str, state: dict) -> RunError | None:
    """Why nothing can be asked of the run now, if its head is away; else None."""
    if not is_away(state):
        return None
    head = state["head"]
    ago = time.time() - head["since"]
    left = (head.get("grace_s") or 0) - ago
    return RunError(f"run {run_id}'s head is away ({head.get('why')}, {ago:.0f}s ago): its"
                    f" agents keep the job going, but nothing can be asked of it"
                    f" until a head is back (mwrun adopt {run_id}); without one it stops"
                    f" in {max(left, 0):.0f}s (head_grace)")


HEAD_WAIT = 10.0  # seconds a command that needs the head waits for a new one


def head_wait() -> float:
    """HEAD_WAIT, or ``MWRUN_HEAD_WAIT`` seconds where that is set (0: refuse at once)."""
    try:
        return max(float(os.environ.get("MWRUN_HEAD_WAIT", HEAD_WAIT)), 0.0)
    except ValueError:
        return HEAD_WAIT


def until_head(run_id: str, state: dict, say: Callable[[str], None] = lambda text: None,
               clock=time.monotonic, sleep=time.sleep, limit: float | None = None) -> dict:
    """The run's state once it has a head: at once, or, while its head is away (or a
    new head takes it back), once a new head has it (head_restart, mwrun adopt),
    saying that it waits; its ``away_error`` after ``limit`` seconds without one."""
    if "head" not in state:
        return state
    limit = head_wait() if limit is None else limit
    head = state["head"]
    say(f"run {run_id}'s head is away ({head.get('why')}); waiting up to {limit:g}s for a"
        f" new head (head_restart, or mwrun adopt {run_id})" if is_away(state) else
        f"run {run_id} is being taken back by a new head; waiting up to {limit:g}s for it")
    deadline = clock() + limit
    while clock() < deadline:
        sleep(0.1)  # another process's adoption; nothing to block on
        now = read_state(run_id)
        if now is not None and "head" not in now and is_live(now):
            say(f"run {run_id} has a head again (pid {now.get('supervisor_pid')})")
            return now
        state = now or state
    away = away_error(run_id, state)
    if away is None:  # ended meanwhile, or lost: what it is now says why
        return state
    raise away


def _load(run_id: str) -> dict:
    """The run's state.json as its head last wrote it."""
    path = run_path(run_id) / schema.STATE
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
    found = problem(doc)
    if found:
        raise RunError(f"run {run_id!r}: its state.json is damaged ({found})")
    return doc


def read_plan(run_id: str) -> dict | None:
    """The plan the run was launched with (plan.json), or None if it cannot be read."""
    try:
        return json.loads((run_path(run_id) / schema.PLAN).read_text())
    except (OSError, ValueError):
        return None


def read_revisions(run_id: str) -> list[dict]:
    """Every revision of the plan the run keeps (mwrun scale, mwrun drain), oldest
    first: what each added (``started``: process -> its plan as people read it), retired
    and did to each world (membership/revision.py ``Revision.record``). Past its cap
    the file was rotated and begins with a ``summary`` record, the revisions before it
    summed up (head/observe/revisions.py): laid over the launch plan in order, they give
    the plan as it is. A line cut short (the run is writing it) or damaged is left out."""
    return revisions_in(run_path(run_id))


def revisions_in(folder: Path) -> list[dict]:
    """``read_revisions`` of the run folder ``folder``."""
    text = ""
    for name in (schema.REVISIONS_ROTATED, schema.REVISIONS):
        with contextlib.suppress(OSError):
            text += (folder / name).read_text(errors="replace") + "\n"
    found = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and isinstance(record.get("started"), dict):
                found.append(record)
    return found


def plan_now(plan: dict | None, revisions: list[dict]) -> dict | None:
    """The launch plan with each revision's new processes laid over it (what status
    says of how each started is planned there)."""
    if plan is None or not revisions:
        return plan
    processes = dict(plan.get("processes") or {})
    for revision in revisions:
        processes.update(revision["started"])
    return {**plan, "processes": processes}


def recent_events(run_id: str, count: int = 6) -> list[str]:
    """The last ``count`` lines of the run's events.log ("HH:MM:SS what happened"),
    oldest first: the order they happened in."""
    try:
        with open(run_path(run_id) / schema.EVENTS, "rb") as log:
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
        # Its own start, not another's with its pid: a head that adopted the run started
        # after the run did.
        began = state.get("supervisor_started_at") or state.get("started_at", time.time())
        return proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= began + 1
    except psutil.Error:
        return False


def lost(doc: dict, left=None, why: str | None = None) -> dict:
    """The document of a run whose head died before the run ended, as things are now:
    the run LOST, its worlds closed (their stores lived in the head), each process that
    was alive either left behind (still running on this machine, unsupervised: shown
    UNRESPONSIVE, as nobody hears it; ``mwrun stop`` ends it) or FAILED, and its remote
    hosts LOST (their agents end what they started when the head goes). ``left(proc)``:
    whether a process entry of this machine still runs (default: ``left_behind``);
    ``why``: what its agents said when they stopped everything (else the head's death)."""
    left = left_behind if left is None else left
    local = {h["name"] for h in doc.get("hosts") or () if h.get("state") == schema.HostState.LOCAL}
    pid = doc.get("supervisor_pid")
    why = why or (f"its head (supervisor pid {pid}) is gone without ending the run: nothing"
                  f" supervises it" if pid else "its head is gone without ending the run")
    procs = []
    for proc in doc["processes"]:
        if proc["state"] not in _EXPECTED:
            procs.append(proc)
        elif (not local or proc["host"] in local) and left(proc):
            procs.append({**proc, "state": P.UNRESPONSIVE.value, "left_behind": True,
                          "last_event": "left behind by its head: running, unsupervised"
                                        " (mwrun stop ends it)"})
        else:
            remote = local and proc["host"] not in local
            procs.append({**proc, "state": P.FAILED.value, "last_event": (
                f"its host {proc['host']}'s agent ends it once the head is gone" if remote
                else "gone with its head")})
    worlds = [w if w["state"] == W.CLOSED else
              {**w, "state": W.CLOSED.value, "reason": "its store went with the head",
               "calls_per_s": None, "bytes_per_s": None, "healthy_for_s": None}
              for w in doc["worlds"]]
    hosts = [h if h.get("state") == schema.HostState.LOCAL else
             {**h, "state": schema.HostState.LOST.value} for h in doc.get("hosts") or ()]
    return {**doc, "state": R.LOST.value, "lost": why, "processes": procs, "worlds": worlds,
            **({"hosts": hosts} if "hosts" in doc else {})}


def left_behind(proc: dict) -> bool:
    """Whether the process of a status entry still runs on this machine: its pid alive
    and started no later than the entry says (else the pid was taken again)."""
    return _same_process(proc.get("pid"), proc.get("started_at"))


def _same_process(pid, started_at) -> bool:
    if not pid or not isinstance(started_at, int | float):
        return False
    try:
        found = psutil.Process(pid)
        return found.status() != psutil.STATUS_ZOMBIE and found.create_time() <= started_at + 1
    except psutil.Error:
        return False


def end_left_behind(doc: dict, wait: float = 5.0) -> tuple[list[str], list[str]]:
    """SIGKILL the processes (and their process groups) a lost run left running on this
    machine; (those ended, those still alive after ``wait`` seconds) as 'NAME (pid N)'."""
    found = []
    for entry in doc["processes"]:
        if entry.get("left_behind") and left_behind(entry):
            with contextlib.suppress(psutil.Error):  # it may end meanwhile: nothing to do
                found.append((entry, psutil.Process(entry["pid"])))
    for _, proc in found:
        with contextlib.suppress(OSError):
            if os.getpgid(proc.pid) == proc.pid:  # it leads its group: what it started too
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _, alive = psutil.wait_procs([proc for _, proc in found], timeout=wait)
    said = {proc.pid: f"{p['name']} (pid {proc.pid})" for p, proc in found}
    stuck = [said[proc.pid] for proc in alive]
    return [s for pid, s in said.items() if s not in stuck], stuck


def held(state: dict) -> str | None:
    """Why a run's folder must stay, or None when nothing of the run can still use it:
    its head alive (running, or still writing its last word), or processes a lost run
    left running on this machine."""
    if supervisor_alive(state):
        return "it is live" if state["state"] not in FINAL else "its head is still ending"
    if state["state"] not in FINAL:
        return "its head's state is unknown"  # load_state makes these lost: never here
    left = [p["name"] for p in state["processes"] if p.get("left_behind")]
    if left:
        return (f"{len(left)} of its processes still run unsupervised ({', '.join(left[:3])}"
                f"{', ...' if len(left) > 3 else ''}); mwrun stop {state['run_id']} ends them")
    return None


def ended_at(run_id: str) -> float | None:
    """When a run's head last wrote its state (final once the run ended)."""
    try:
        return (run_path(run_id) / schema.STATE).stat().st_mtime
    except OSError:
        return None


def disk_bytes(folder: Path) -> int:
    """Bytes a folder takes on disk: its files' blocks, as ``du`` counts them."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def remove(run_id: str) -> int:
    """Remove a run's folder (and its control socket, where that lay elsewhere); the
    bytes freed. RunError when the run is held (``held``, looked at again now: it may
    have changed since it was listed) or cannot be removed."""
    path = run_path(run_id)
    state = load_state(run_id)
    why = held(state)
    if why is not None:
        raise RunError(f"run {run_id} was kept: {why}")
    freed = disk_bytes(path)
    try:
        shutil.rmtree(path)
    except OSError as exc:
        raise RunError(f"run {run_id}: cannot remove {exc.filename or path}:"
                       f" {exc.strerror or exc}") from None
    forget_sockets(path)  # /tmp/mwrun-UID/..., where its path was too long
    return freed


def is_live(state: dict) -> bool:
    return state.get("state") not in FINAL and "control" in state and supervisor_alive(state)


def is_away(state: dict) -> bool:
    """Whether the run goes on while its head is away (``load_state`` says so)."""
    return (state.get("head") or {}).get("state") == schema.HeadState.AWAY


def goes_on(state: dict) -> bool:
    """A run a command without RUN may mean: live, or going on while its head is away
    (a command then says why it cannot act, rather than that there is no run)."""
    return is_live(state) or is_away(state)


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
    found = next(((r, s) for r, s in runs if not live_only or goes_on(s)), None)
    since = found[1]["started_at"] if found else 0.0
    for _, mtime, why in sorted(damaged, key=lambda d: d[1]):
        if warn is not None and mtime >= since:
            warn(f"skipped: {why}")
    if found is None:
        raise RunError(("no live run" if live_only else "no run") + _recent_hint(runs))
    return found


def find_sole(run_id: str | None, usage: str, warn=None) -> tuple[str, dict]:
    """The run named, or else the only live run. With two or more live runs and none
    named, RunError listing them: a verb that ends or breaks a job (stop, kill-world)
    must never guess which of someone's jobs was meant; ``usage`` shows how to name
    one ("mwrun stop RUN")."""
    if run_id is not None:
        return run_id, load_state(run_id)
    live = [(r, s) for r, s in all_runs() if goes_on(s)]
    if len(live) > 1:
        now = time.time()
        listed = "\n".join(f"  {r} ({s['state']}, started {_ago(now - s['started_at'])} ago)"
                           for r, s in live)
        raise RunError(f"{len(live)} runs are live and none was named; which one? run"
                       f" {usage}, with RUN one of:\n{listed}")
    return find(None, warn=warn)


def _ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m" \
        if seconds < 7200 else f"{seconds / 3600:.0f}h"


def _recent_hint(runs=None) -> str:
    runs = (all_runs() if runs is None else runs)[:3]
    if not runs:
        return f"; none at all under {runs_root()}"
    listed = ", ".join(f"{r} ({s.get('state', '?')})" for r, s in runs)
    return f"; recent runs: {listed}"


def signal_number(value) -> int:
    """'KILL', 'SIGSTOP', 'term', 9 -> a signal number; ValueError otherwise."""
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        number = int(value)
        signal.Signals(number)
        return number
    name = str(value).upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {value!r}") from None


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def same_user(sock: socket.socket) -> bool:
    return peer_uid(sock) == os.getuid()


def request(path: str, message: dict, timeout: float = 10.0, check: bool = True) -> dict:
    """Send one request to a run's supervisor and return its reply (RunError if none;
    with ``check``, RunError too when it refused)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            if not same_user(sock):  # a socket put in the supervisor's place
                raise RunError(f"refusing {path}: it is answered by uid {peer_uid(sock)},"
                               f" not by this user's supervisor (uid {os.getuid()})")
            sock.sendall(json.dumps(message).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except (FileNotFoundError, ConnectionRefusedError):
        raise NotListening("its supervisor is not running (no one answers on"
                           f" {path})") from None
    except OSError as exc:
        raise RunError(f"cannot reach its supervisor at {path}: {exc}") from None
    try:
        reply = json.loads(data)
    except ValueError:
        raise RunError("its supervisor closed the connection without answering") from None
    if check and not reply.get("ok"):
        raise RunError(reply.get("error", "the supervisor refused"))
    return reply


START_WAIT = 60.0  # seconds a request waits for a starting run's supervisor to listen


def ask(run_id: str, state: dict, message: dict, check: bool = True,
        say: Callable[[str], None] = lambda text: None, clock=time.monotonic,
        sleep=time.sleep) -> dict:
    """``request`` to run ``run_id``'s supervisor (``state``: its state.json). A run's
    folder names its control socket from the first moment, while its supervisor is
    still starting (imports, zygotes) and not listening yet: a request then waits for
    it, saying so once, until the run has left ``starting`` (it listens before), its
    supervisor has gone, or START_WAIT has passed."""
    state = until_head(run_id, state, say)
    deadline, said, pause, last = clock() + START_WAIT, False, 0.02, False
    while True:
        try:
            return request(state["control"], message, check=check)
        except NotListening:
            if last:
                raise
            now = read_state(run_id) or {}
            # once it has left starting, one try more: it listens before it says so
            last = now.get("state") != R.STARTING or not supervisor_alive(now) \
                or clock() >= deadline
        if last:
            continue
        if not said:
            say(f"run {run_id} is starting; waiting for its supervisor to listen")
            said = True
        sleep(pause)  # another process's start; nothing to block on
        pause = min(pause * 2, 0.2)


# The status document's shape: what every reader checks before using one.
_NUMBER = (int, float)
_RUN = {"run_id": str, "name": str, "state": str, "supervisor_pid": (int, type(None)),
        "started_at": _NUMBER, "processes": list, "worlds": list}
_RUN_OPTIONAL = {"control": str}  # a run that never started has no control socket
_PROCESS = {"name": str, "host": str, "pid": (int, type(None)), "state": str,
            "exit_code": (int, type(None)), "restarts": int, "worlds": dict}
_WORLD = {"name": str, "state": str, "generation": int, "breaks": int, "backend": str,
          "port": int, "members": list}
_POSITIVE = ("supervisor_pid", "pid")


def _fields(doc, fields: dict, what: str, optional: dict | None = None) -> str | None:
    if not isinstance(doc, dict):
        return f"{what} is {type(doc).__name__}, not an object"
    for key, kind in {**fields, **(optional or {})}.items():
        if key not in doc:
            if key in fields:
                return f"{what} has no '{key}'"
            continue
        value = doc[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            return f"{what}: '{key}' is {value!r}"
        if key in _POSITIVE and value is not None and value <= 0:
            return f"{what}: '{key}' is {value!r}, not a process id"
    return None


def problem(doc) -> str | None:
    """What makes ``doc`` unusable as a status document, or None if nothing does."""
    found = _fields(doc, _RUN, "the state", _RUN_OPTIONAL)
    if found:
        return found
    for index, proc in enumerate(doc["processes"]):
        found = _fields(proc, _PROCESS, f"process {index}")
        if found:
            return found
    for index, world in enumerate(doc["worlds"]):
        found = _fields(world, _WORLD, f"world {index}")
        if found:
            return found
    return None
