"""What every bench shares about the job it runs: ``mwrun launch`` started and watched,
and every wait on the job ended at once, with the launch's own words, when the job
will not come (the launch exited or was refused, its run failed or lost its head),
instead of a silent wait to the wait's timeout.

Imported as ``common`` (a bench's own folder first on the path) and as
``bench.common`` (the checkout's root first): it needs the standard library, psutil
and the mwrun it measures (for the run states' names), nothing of the other benches.
"""

from __future__ import annotations

import compileall
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mwrun.runs import supervisor_alive
from mwrun.schema import FINAL, WorldState

PY = sys.executable
T = TypeVar("T")
_END = ("", {"event": None})  # the reader's last word: the launch's output ended


class NotStarted(SystemExit):
    """The job a bench waits on will not come; the message says why, in the words of
    the launch (or of its run's document). A SystemExit, so that a bench that does not
    catch it ends with that message and status 1, its ``finally`` blocks run."""


def compiled(*checkouts: Path | None) -> None:
    """mwrun's bytecode written for each checkout (None: this one), as ``pip install``
    writes it for a user: a checkout run under PYTHONDONTWRITEBYTECODE, or with stale
    .pyc files after a change, compiles mwrun's modules in every process it starts, and
    a launch of 128 then measured that (0.5 s more before the zygote even started)."""
    for checkout in checkouts:
        root = checkout or Path(__file__).resolve().parent.parent
        compileall.compile_dir(str(root / "mwrun"), quiet=1)


def tail(lines: list[str], count: int = 15) -> str:
    return "\n".join(lines[-count:])


def ended(popen: subprocess.Popen, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``popen``, told to end already, to end; then
    SIGKILL it. Reaped either way: a bench leaves neither a process nor a zombie."""
    try:
        popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


def exited(popen: subprocess.Popen, lines: list[str], what: str = "mwrun launch") -> str | None:
    """Why a launcher that has exited will not bring its job: its status and its last
    lines (a refusal among them); None while it runs."""
    code = popen.poll()
    if code is None:
        return None
    return f"{what} exited with status {code}; its last lines:\n{tail(lines)}"


def run_over(doc: dict | None) -> str | None:
    """Why the run of a state document will never come up, or None while it may: it
    ended (finished, failed, lost), or its head is gone without writing so."""
    if doc is None:
        return None
    if doc["state"] in FINAL:
        return f"run {doc.get('run_id')} is {doc['state']}" + (
            f": {doc['lost']}" if doc.get("lost") else "")
    if doc.get("supervisor_pid") and not supervisor_alive(doc):
        return f"run {doc.get('run_id')}: its head (pid {doc['supervisor_pid']}) is gone"
    return None


def read_doc(path: Path) -> dict | None:
    """A state.json as it is now; None while it is not there or being replaced."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def state_doc(home: Path, runs: str = "*") -> dict | None:
    """The first run's state.json under MWRUN_HOME ``home`` (runs matching ``runs``)."""
    for path in sorted((home / "runs").glob(f"{runs}/state.json")):
        return read_doc(path)
    return None


def closed_world(doc: dict | None) -> str | None:
    """Why a run will never have every world healthy: a world of it closed (a member
    failed for good, say), which no wait will see healthy again; None otherwise."""
    for world in (doc or {}).get("worlds") or ():
        if world["state"] == WorldState.CLOSED.value:
            return f"world {world['name']} is closed: {world.get('reason') or 'no reason said'}"
    return None


def all_healthy(doc: dict | None) -> bool:
    """Every world healthy; a run folder's first document has none, and all() over
    nothing would hold at once."""
    return bool(doc and doc["worlds"] and all(w["state"] == "healthy" for w in doc["worlds"]))


def wait_for(found: Callable[[], T | None], gone: Callable[[], str | None], timeout: float,
             what: str, every: float = 0.1) -> T:
    """Poll ``found()`` until it gives a value and return it. ``gone()`` says why the
    job will not come (or None while it may): said at once, as NotStarted. At the
    timeout, NotStarted saying ``what`` was not seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = found()
        if value:
            return value
        why = gone()
        if why:
            raise NotStarted(f"{what}: never, {why}")
        if time.monotonic() >= deadline:
            raise NotStarted(f"{what}: not seen in {timeout:g} s")
        time.sleep(every)  # another process's files: nothing to block on


class Launched:
    """``mwrun launch`` in a subprocess: its output lines kept, its prefixed JSON lines
    (a process's ``{"event": ...}``) in a queue, its end noticed by every wait."""

    def __init__(self, topology: Path, home: Path, *extra: str, env: dict | None = None,
                 cwd: Path | None = None):
        self.home = home
        self.popen = subprocess.Popen(
            [PY, "-m", "mwrun", "launch", str(topology), *extra], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, cwd=cwd,
            env={**os.environ, **(env or {}), "MWRUN_HOME": str(home), "NO_COLOR": "1"})
        self.events: queue.Queue = queue.Queue()
        self.lines: list[str] = []
        self.backlog: list[tuple[str, dict]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None, "stdout=PIPE above"
        for line in self.popen.stdout:
            self.lines.append(line.rstrip())
            name, _, text = line.partition(" | ")
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                self.events.put((name.strip(), value))
        self.popen.stdout.close()  # only this thread reads it
        self.events.put(_END)

    def ended(self) -> str | None:
        """Why the launch will not bring its job: it exited (its status and last lines,
        its refusal among them); None while it runs."""
        if self.popen.poll() is not None:
            self.reader.join(timeout=5)  # the lines it wrote before it exited
        return exited(self.popen, self.lines)

    def gone(self, runs: str = "*") -> str | None:
        """Why this job will not come, or None while it may: the launch exited, or its
        run says it is over."""
        return self.ended() or run_over(self.state(runs))

    def state(self, runs: str = "*") -> dict | None:
        return state_doc(self.home, runs)

    def healthy(self, timeout: float, runs: str = "*", every: float = 0.5) -> dict:
        """The run's state.json once every world in it is healthy; at once, saying why,
        when the job will not come or a world of it closed. One read of the document
        a look (it is large at scale, and this process shares the head's cores)."""
        seen: dict | None = None

        def found() -> dict | None:
            nonlocal seen
            seen = self.state(runs)
            return seen if all_healthy(seen) else None

        return wait_for(found, lambda: self.ended() or run_over(seen) or closed_world(seen),
                        timeout, f"every world of the job in {self.home} healthy", every)

    def expect(self, name: str, event: str, timeout: float = 60.0) -> dict:
        """The oldest unclaimed ``event`` of process ``name``."""
        return self.expect_where(lambda who, value: who == name and value.get("event") == event,
                                 timeout, f"{event!r} from {name}")

    def expect_where(self, match: Callable[[str, dict], bool], timeout: float = 60.0,
                     what: str = "a line that matched") -> dict:
        """The oldest unclaimed JSON line for which ``match(process, value)`` holds
        (lines that no wait claims wait for whoever asks for them)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, (who, value) in enumerate(self.backlog):
                if match(who, value):
                    del self.backlog[i]
                    return value
            try:
                got = self.events.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise NotStarted(f"no {what} in {timeout:g}s; last lines:\n"
                                 f"{tail(self.lines)}") from None
            if got is _END:
                self.events.put(_END)  # for the next wait too
                self.popen.wait(timeout=60)  # its output ended: it is exiting
                raise NotStarted(f"no {what}: {self.gone()}")
            self.backlog.append(got)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
        # The head's end may wait up to a minute for a store's build still importing
        # torch (keeper/pending.py CLOSE_WAIT; an import cannot be cut short), which
        # on a loaded machine took all of it (a CI pair of stop 40): more than that.
        self.popen.wait(timeout=120)
