"""Which head a run obeys: its epoch, and the secret a head proves itself by.

Every head of a run takes the next epoch by making the file ``EPOCHS/N`` in the run
folder, exclusively (a link, which fails on a name that exists): the launch's head
makes 1, each adopting head the one after the highest there. Of two heads that try
the same number at once, one makes it and the other is told so. Agents and the
keeper obey only a head whose epoch is above every one they obeyed (host/door.py,
keeper/door.py): a stale head, one that was stopped while another adopted its run,
is refused wherever it speaks.

The secret is made with the run (owner-only, in the run folder) and handed to the
agents of the head's machine in their environment (never an argv); an adopting head
reads it back to prove itself at their doors.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from pathlib import Path

import psutil

from mwrun.errors import RunError, StaleHead
from mwrun.schema import EPOCHS, SECRET, STATE


def current(run_dir: Path) -> int:
    """The newest epoch taken in the run (0: none yet)."""
    with contextlib.suppress(OSError):
        return max((int(n) for n in os.listdir(run_dir / EPOCHS) if n.isdigit()),
                   default=0)
    return 0


HANDOVER = "restart-head"  # why a head took the run from one that lives, on purpose
# Seconds a head that handed its run over keeps its links open for the new head, at
# most: below an ssh agent's silence limit (frames.SILENCE, 15 s), past which it would
# take this head for gone.
HANDOVER_WAIT = 12.0


def take(run_dir: Path, force: bool = False, why: str = "adopt") -> int:
    """The next epoch, made ours; RunError while the head of the newest one lives
    (unless ``force``: that head is stale from then on), or if another head took the
    next one first. ``why`` is written beside our pid (HANDOVER: the head before us
    hands the run over, and says so)."""
    folder = run_dir / EPOCHS
    folder.mkdir(mode=0o700, exist_ok=True)
    newest = current(run_dir)
    holder = _pid_of(folder / str(newest)) if newest else "unknown"
    if not force and holder.isdigit() and int(holder) != os.getpid() \
            and _alive(int(holder)):
        raise RunError(f"the run has a head: pid {holder} (epoch {newest}); only a run whose"
                       " head is gone can be adopted")
    epoch = newest + 1
    # The epoch's file appears whole, its holder already in it: written aside, then
    # linked into place (a link, like O_EXCL, fails on a name that exists). Made empty
    # and written after, a second head that looked in between read no holder, took the
    # one after, and both adopted the run.
    mine = folder / f".{epoch}.{os.getpid()}"
    fd = os.open(mine, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(f"{os.getpid()}\n{why}\n")
    try:
        os.link(mine, folder / str(epoch))
    except FileExistsError:
        raise RunError(f"another head took epoch {epoch} of this run first (its pid:"
                       f" {_pid_of(folder / str(epoch))}); it adopts the run, not this one"
                       ) from None
    finally:
        os.unlink(mine)
    return epoch


class Fence:
    """A head's look at whether it is still the run's: ``check`` raises StaleHead once
    a newer epoch exists. It costs a stat of the folder per look (a new epoch's file
    changes the folder's mtime), so the loop looks at every wakeup: a head that was
    stopped while another adopted its run sees it before it acts on anything."""

    def __init__(self, run_dir: Path, epoch: int):
        self.folder, self.epoch = run_dir / EPOCHS, epoch
        self.seen = self._mtime()

    def _mtime(self) -> int:
        try:
            return os.stat(self.folder).st_mtime_ns
        except OSError:
            return 0

    def check(self) -> None:
        mtime = self._mtime()
        if mtime == self.seen:
            return
        self.seen = mtime
        newest = current(self.folder.parent)
        if newest <= self.epoch:
            return
        pid, why = _pid_of(self.folder / str(newest)), _why_of(self.folder / str(newest))
        if why == HANDOVER:
            raise StaleHead(f"handed over to a new head (pid {pid}, epoch {newest}; mwrun"
                            f" restart-head): its console is in the run folder's"
                            f" supervisor.log", handed=True)
        raise StaleHead(f"a newer head (epoch {newest}, pid {pid}) adopted this run; this"
                        f" head (epoch {self.epoch}) changes nothing more and exits")


def await_successor(run_dir: Path, epoch: int, limit: float = HANDOVER_WAIT,
                    clock=time.monotonic, sleep=time.sleep) -> None:
    """Return once the head that took the run from the head of ``epoch`` has it all
    (its state.json, no longer saying it adopts), or has died, or after ``limit``
    seconds. Meanwhile the old head keeps its links and the keeper's connection open,
    doing nothing on them: a run without a head_grace ends where a link closes before
    the new head took it over (an ssh host's agent is reached in a second or so)."""
    folder = run_dir / EPOCHS
    deadline = clock() + limit
    while clock() < deadline:
        newest = current(run_dir)
        pid = _pid_of(folder / str(newest))
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads((run_dir / STATE).read_text())
            if isinstance(doc, dict) and (doc.get("epoch") or 1) > epoch \
                    and "head" not in doc:
                return
        if newest > epoch and (not pid.isdigit() or not _alive(int(pid))):
            return  # (it failed: nothing to wait for)
        sleep(0.02)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, not reaped yet, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # (another user's: it lives)


def _pid_of(path: Path) -> str:
    with contextlib.suppress(OSError, IndexError):
        return path.read_text().split()[0]
    return "unknown"


def _why_of(path: Path) -> str:
    with contextlib.suppress(OSError, IndexError):
        return path.read_text().split()[1]
    return ""


def make_secret(run_dir: Path) -> str:
    """The run's secret, made now (owner-only)."""
    secret = secrets.token_hex(32)
    fd = os.open(run_dir / SECRET, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(secret)
    return secret


def told(run_dir: Path, epoch: int) -> tuple[str, int] | None:
    """(the run's secret, ``epoch``): what a head tells its remote agents; None for a
    run that has no secret (a head handed one without its folder, in a test)."""
    try:
        return secret(run_dir), epoch
    except RunError:
        return None


def secret(run_dir: Path) -> str:
    """The run's secret; RunError for a run that has none (launched by an mwrun from
    before adoption, or never adoptable)."""
    try:
        return (run_dir / SECRET).read_text().strip()
    except OSError:
        raise RunError(f"the run has no secret ({run_dir / SECRET}): it was launched by an"
                       " mwrun that could not be adopted") from None
