"""Stacks read from outside a process, by py-spy (the optional extra ``mwrun[stacks]``).

Why py-spy: it reads a live CPython's frames from outside (process_vm_readv), so it
answers for the members the library cannot speak for: one stopped (SIGSTOP), one
holding the GIL in a C loop, one whose link thread is starved. With ``--nonblocking``
it never pauses the process, which ``mwrun stacks`` promises, and it reads a stopped
one in tens of milliseconds where pystack must attach with ptrace and waits for a
stopped tracee. Native frames (``--native``) need the process paused, so they are
asked only of a member declared hung, which is about to be killed anyway; when that
fails (a stopped process cannot be paused again) the Python frames are read instead.

Each capture is a child process whose output pipe sits in the owner's selector, so
the loop never waits for one; ``Spies`` keeps them until each has answered or its
deadline passed. What failed is said with its reason, never silence: the tool is not
installed, ptrace is not permitted (``kernel.yama.ptrace_scope``, a container without
CAP_SYS_PTRACE), the process has gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TOOL = "py-spy"
ENV = "MWRUN_STACKS_TOOL"  # a path to py-spy, or "none" to read stacks from inside only
MAX_OUTPUT = 4 * 2**20
MAX_FRAMES = 64  # per thread, innermost kept (as the library's dump)
MAX_TEXT = 160


def find(env: Mapping[str, str] = os.environ) -> tuple[str | None, str | None]:
    """(py-spy's path, None), or (None, why it is not used)."""
    chosen = env.get(ENV)
    if chosen == "none":
        return None, f"out-of-process capture is off ({ENV}=none)"
    if chosen:
        return (chosen, None) if os.access(chosen, os.X_OK) else \
            (None, f"{ENV}={chosen} is not an executable")
    beside = os.path.join(os.path.dirname(sys.executable), TOOL)  # this venv's own
    found = beside if os.access(beside, os.X_OK) else shutil.which(TOOL)
    if found is None:
        return None, ("py-spy is not installed (pip install 'mwrun[stacks]'), so only"
                      " what each library says of itself is captured")
    return found, None


def command(tool: str, pid: int, native: bool) -> list[str]:
    return [tool, "dump", "--pid", str(pid), "--json",
            *(["--native"] if native else ["--nonblocking"])]


def threads(text: str) -> list[dict]:
    """py-spy's JSON dump as the library's own (worlds/stacks.py): per thread its id,
    name, the main one marked, frames outermost first ([file, line, function, text]);
    plus what only the outside sees: whether it held the GIL and was running."""
    found = []
    for t in json.loads(text):
        frames = [[f.get("filename") or "?", f.get("line") or 0,
                   (f.get("name") or "?")[:MAX_TEXT], ""]  # C++ names run to pages
                  for f in reversed(t.get("frames") or [])]
        found.append({"id": t.get("thread_id"), "name": t.get("thread_name") or
                      f"thread {t.get('os_thread_id')}", "daemon": False,
                      "main": t.get("os_thread_id") == t.get("pid"),
                      "stack": frames[-MAX_FRAMES:], "cut": len(frames) > MAX_FRAMES,
                      "call": None, "active": bool(t.get("active")),
                      "gil": bool(t.get("owns_gil"))})
    found.sort(key=lambda t: (not t["main"], t["name"]))
    return found


def reason(stderr: str, pid: int, alive: bool) -> str:
    """Why py-spy read nothing, in the user's words."""
    text = stderr.lower()
    if not alive:
        return f"process {pid} had gone before py-spy could read it"
    if "permission" in text or "operation not permitted" in text or "eperm" in text:
        return ("py-spy has no ptrace permission here (kernel.yama.ptrace_scope, or a"
                " container without CAP_SYS_PTRACE): " + _first_line(stderr))
    if "failed to suspend" in text:
        return "py-spy could not pause it (it is stopped): " + _first_line(stderr)
    return "py-spy failed: " + (_first_line(stderr) or "no output")


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()
             and not line.strip()[0].isdigit() and "backtrace" not in line.lower()]
    return " ".join(lines[:3])[:300]


@dataclass
class Spy:
    """One capture under way: its child, what it wrote so far."""

    key: object  # the asker's
    pid: int
    native: bool
    deadline: float
    until: float  # the whole capture's end: a native read that fails leaves time after it
    child: subprocess.Popen
    out: bytearray = field(default_factory=bytearray)
    result: dict | None = None  # {"threads": [...], "error": None, "by": ...} once done


class Spies:
    """py-spy captures as children of this process, read through ``selector``; each
    answer goes to ``done(key, pid, result)`` where result is ``{"threads", "error",
    "by"}``, at its end or at its deadline (``tick``)."""

    def __init__(self, selector: selectors.BaseSelector, clock: Callable[[], float],
                 done: Callable[[object, int, dict], None]):
        self.selector, self.clock, self.done = selector, clock, done
        self.tool, self.missing = find()
        self.running: dict[int, Spy] = {}  # by the child's stdout's descriptor

    def capture(self, key: object, pid: int, native: bool, within: float) -> str | None:
        """Start reading ``pid``'s stacks; why it cannot be, or None (an answer follows)."""
        if self.tool is None:
            return self.missing
        try:
            child = subprocess.Popen(command(self.tool, pid, native), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     close_fds=True, start_new_session=True)
        except OSError as exc:
            return f"py-spy could not start: {exc}"
        now = self.clock()  # a native read gets half the time: Python frames may follow
        spy = Spy(key, pid, native, now + (within / 2 if native else within), now + within,
                  child)
        assert child.stdout is not None
        os.set_blocking(child.stdout.fileno(), False)
        self.running[child.stdout.fileno()] = spy
        self.selector.register(child.stdout, selectors.EVENT_READ, (self._read, spy))
        return None

    def asked(self, frame: dict) -> None:
        """The head's CAPTURE frame, on a remote host's agent: its answer goes to
        ``done`` as any other (the agent sends it up as a CAPTURED frame)."""
        key = str(frame.get("key"))
        try:
            pid, within = int(frame["pid"]), float(frame["within"])
        except (KeyError, TypeError, ValueError):
            return
        why = self.capture(key, pid, bool(frame.get("native")), within)
        if why is not None:
            self.done(key, pid, {"threads": [], "error": why, "by": None})

    def _read(self, spy: Spy) -> None:
        assert spy.child.stdout is not None
        try:
            chunk = spy.child.stdout.read(65536)
        except OSError:
            chunk = b""
        if chunk is None:
            return  # nothing yet
        if chunk and len(spy.out) < MAX_OUTPUT:
            spy.out += chunk
            return
        self._end(spy)

    def _end(self, spy: Spy, late: bool = False) -> None:
        assert spy.child.stdout is not None and spy.child.stderr is not None
        fd = spy.child.stdout.fileno()
        self.running.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(spy.child.stdout)
        if late:
            with contextlib.suppress(OSError):
                os.killpg(spy.child.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
            spy.child.wait(timeout=1)
        stderr = ""
        if not late:
            with contextlib.suppress(OSError, ValueError):
                os.set_blocking(spy.child.stderr.fileno(), False)
                stderr = (spy.child.stderr.read(8192) or b"").decode(errors="replace")
        spy.child.stdout.close()
        spy.child.stderr.close()
        result = self._result(spy, stderr, late)
        if spy.native and result["error"] is not None and _alive(spy.pid):
            # Native frames need the process paused, which a stopped one cannot be (or
            # took too long on a busy host): its Python frames then, without pausing it.
            left = spy.until - self.clock()
            if left > 0 and self.capture(spy.key, spy.pid, False, left) is None:
                return
        self.done(spy.key, spy.pid, result)

    def _result(self, spy: Spy, stderr: str, late: bool) -> dict:
        by = "py-spy --native" if spy.native else "py-spy"
        if late:
            return {"threads": [], "by": by, "error": "py-spy did not answer in time"}
        try:
            return {"threads": threads(bytes(spy.out).decode(errors="replace")),
                    "by": by, "error": None}
        except (ValueError, TypeError, AttributeError):
            return {"threads": [], "by": by,
                    "error": reason(stderr, spy.pid, _alive(spy.pid))}

    def tick(self) -> None:
        """End the captures past their deadline (each said: it did not answer)."""
        now = self.clock()
        for spy in [s for s in self.running.values() if s.deadline <= now]:
            self._end(spy, late=True)

    def earliest(self) -> float | None:
        return min((s.deadline for s in self.running.values()), default=None)

    def close(self) -> None:
        for spy in list(self.running.values()):
            self._end(spy, late=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
