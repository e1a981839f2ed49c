"""Inside a process forked from the zygote: become the planned process, as if fresh.

What a fresh ``python script.py`` / ``python -m module`` would have and a fork does not
is set here, in this order: death with the supervisor (``_die_with_supervisor``), its
own session (before its pid is reported, so the supervisor's first signal reaches a
real process group), CPU affinity, the signal dispositions and mask an exec'd
interpreter starts with and then the handlers the preload imports set (a fresh import
sets them too), stdio on the supervisor's pipe, only descriptors 0-2 open and those the
preloaded modules opened at import, the environment replaced (not merged), the cwd,
``sys.argv``/``sys.orig_argv``/``sys.path[0]``/``sys.executable``, import caches, the
random state (Python's generators that a fresh import seeds from the OS reseeded from
it, numpy's global one too, torch's default generator seeded as a fresh import seeds
it; seeds.py), a fresh ``__main__``; then the script or module runs, and an uncaught
exception or ``SystemExit`` ends the process as the interpreter would.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import faulthandler
import importlib
import json
import linecache
import os
import signal
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mwrun.host.seeds import Imprint
    from mwrun.host.title import Area

PR_SET_PDEATHSIG = 1
MIDDLE_EXIT = 10.0  # seconds the middle process may take to exit (it does at once)
_OURS = (__file__, __file__.replace("child.py", "zygote.py"))


@dataclass
class Fresh:
    """What a fresh interpreter of the zygote's kind starts from, captured once."""

    path: list[str]  # sys.path without its first entry
    own_modules: set[str]  # the zygote's own modules, not the user's to see
    library: frozenset[str]  # of those, the library's, kept where this mwrun is the user's
    origin: str | None  # the zygote's mwrun (its __init__.py)
    torch_rng: object
    area: Area | None
    kept_fds: frozenset[int]  # what the preloaded modules opened at import
    imprint: Imprint  # their generators and signal handlers

    @classmethod
    def capture(cls, path, preloaded: set[str], area, kept_fds, imprint) -> Fresh:
        own = {m for m in sys.modules if (m == "mwrun" or m.startswith("mwrun."))
               and not any(p == m or p.startswith(m + ".") for p in preloaded)}
        # The zygote's own machinery (mwrun.host) is never the user's; the rest is the
        # library and its roots, imported as a fresh ``import mwrun`` would (zygote.py).
        library = frozenset(m for m in own if m != "mwrun.host" and not m.startswith("mwrun.host."))
        origin = getattr(sys.modules.get("mwrun"), "__file__", None)
        torch = sys.modules.get("torch")
        rng = None
        if torch is not None:
            # Older torch seeds every fresh process alike (this constant); newer torch
            # seeds each from the OS: keep the state to restore, or reseed.
            fixed = torch.initial_seed() == 67280421310721
            rng = torch.get_rng_state() if fixed else "reseed"
        return cls(path, own, library, origin, rng, area, frozenset(kept_fds), imprint)


def become(request: dict, fresh: Fresh) -> None:
    """Set up, report the pid, run the user's code; raises SystemExit at the end."""
    report = request["report"]
    try:
        if not request.get("helper"):  # a helper ends with its own link instead
            _die_with_supervisor(request["middle"], request["supervisor"])
        os.setsid()
        if request.get("cpus") is not None:
            os.sched_setaffinity(0, request["cpus"])
        _signals(request.get("ignored", []), request.get("mask", []))
        fresh.imprint.restore_handlers()  # a fresh import would have set them again
        stdin, output = request["fds"]
        for fd, target in ((stdin, 0), (output, 1), (output, 2)):
            os.dup2(fd, target)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
    except BaseException as exc:  # reported to the supervisor, which starts it cold
        os.write(report, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        os._exit(127)
    os.write(report, json.dumps({"pid": os.getpid()}).encode())
    # A fresh process holds stdio and what its imports opened; nothing of the zygote's.
    # Closing a preloaded module's file would hand its number to the next descriptor
    # opened (the library's link to the supervisor), and the module would write there.
    _close_fds_but(fresh.kept_fds)
    _identity(request, fresh)
    _reseed(fresh)
    try:
        _run(request["kind"], request["target"], request["args"])
    except SystemExit:
        raise  # the interpreter ends with its code, exactly as for a fresh process
    except BaseException as exc:  # uncaught: reported as the interpreter does
        exc.with_traceback(_user_frames(exc.__traceback__))  # what the hook prints
        sys.excepthook(type(exc), exc, exc.__traceback__)
        if isinstance(exc, KeyboardInterrupt):
            _die_by_sigint()
        raise SystemExit(1) from None
    # Returning ends the interpreter normally: threads joined, atexit run, exit 0.


def _die_with_supervisor(middle: int, supervisor: int) -> None:
    """SIGKILLed should the supervisor die, from before the child leaves the zygote's
    process group: until the supervisor has told its watchdog of the child's own group,
    only this stops a supervisor killed in between from leaving the child behind.

    The signal goes with the death of the parent, so it is set once the middle process
    has gone (set before, its exit would fire it) and the supervisor, a subreaper, is
    the parent; and a supervisor that died before it was set is seen as a new parent.
    The parent is, strictly, a thread: the kernel picks the subreaper's first live one,
    its main thread, which ends only with the process.
    (Cold starts have no such signal; it changes nothing the watchdog would not do.)"""
    deadline = time.monotonic() + MIDDLE_EXIT
    while os.getppid() == middle:  # it exits right after the fork
        if time.monotonic() > deadline:
            raise OSError("the middle process did not exit")
        time.sleep(0.0001)
    if _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != supervisor:
        os._exit(1)  # it is gone already: nobody would ever watch this process


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def open_fds() -> set[int]:
    """Descriptors open now (not the one the listing itself used, closed since)."""
    listed = {int(fd) for fd in os.listdir("/proc/self/fd")}
    return {fd for fd in listed if _is_open(fd)}


def _is_open(fd: int) -> bool:
    try:
        os.get_inheritable(fd)
    except OSError:
        return False
    return True


def _close_fds_but(kept: frozenset[int]) -> None:
    low = 3
    for fd in sorted(fd for fd in kept if fd >= low):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


_FAULTS = (signal.SIGSEGV, signal.SIGFPE, signal.SIGABRT, signal.SIGBUS, signal.SIGILL)


def _signals(ignored: list[int], mask: list[int]) -> None:
    """Dispositions as exec and a fresh interpreter leave them: handlers back to the
    default, what the supervisor ignores stays ignored, Python's own three."""
    handler: signal.Handlers | Callable[[int, types.FrameType | None], object]
    # A zygote started with PYTHONFAULTHANDLER (so is every child it forks: PYTHON* is
    # part of its key) has faulthandler's handlers on the fatal signals, as a fresh
    # interpreter would: they stay, so a native crash writes its stacks to the child's
    # log (fd 2 by then), and signal.getsignal says what it says in a fresh one.
    kept = _FAULTS if faulthandler.is_enabled() else ()
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP) or sig in kept:
            continue
        if sig in ignored or sig in (signal.SIGPIPE, signal.SIGXFSZ):
            handler = signal.SIG_IGN
        elif sig == signal.SIGINT:
            handler = signal.default_int_handler
        else:
            handler = signal.SIG_DFL
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    signal.set_wakeup_fd(-1)


def _identity(request: dict, fresh: Fresh) -> None:
    argv, kind, target = request["argv"], request["kind"], request["target"]
    if fresh.area is not None:
        fresh.area.set_title(" ".join(argv))
        fresh.area.set_environ(request["env"])
    sys.orig_argv = list(argv)
    if os.path.isabs(argv[0]):  # the path it was started by (VENV/bin/python, say), as
        sys.executable = argv[0]  # a fresh interpreter has it; the zygote's is a twin
    if getattr(sys.flags, "safe_path", False):  # -P, new in 3.11 (3.10 has no flag)
        first = []
    elif kind == "module":
        first = [os.getcwd()]
    else:
        first = [os.path.dirname(os.path.realpath(target))]
    sys.path[:] = first + fresh.path
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    linecache.clearcache()
    kept = fresh.library if _imports(fresh.origin) else frozenset()
    for name in fresh.own_modules - kept:
        sys.modules.pop(name, None)
        parent, _, leaf = name.rpartition(".")
        if parent in kept:  # as if never imported: no attribute of it on a kept package
            with contextlib.suppress(AttributeError):
                delattr(sys.modules[parent], leaf)


def _imports(origin: str | None) -> bool:
    """Whether this process, its path set, would import the zygote's mwrun (one beside
    a script, or earlier on its path, would not): asked of the finders in the order
    the import system asks them, sys.modules aside."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        try:
            spec = find("mwrun", None) if find is not None else None
        except Exception:  # a finder that cannot say: import it afresh, as before
            return False
        if spec is not None:
            return origin is not None and spec.origin == origin
    return False


def _reseed(fresh: Fresh) -> None:
    fresh.imprint.reseed()  # from os.urandom, as at a fresh import (seeds.py)
    if isinstance(fresh.torch_rng, str):
        sys.modules["torch"].random.default_generator.seed()
    elif fresh.torch_rng is not None:
        sys.modules["torch"].set_rng_state(fresh.torch_rng)
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if "torch" in sys.modules and threads.isdigit() and int(threads) > 0:
        # OpenMP read the zygote's environment when torch loaded; a fresh process's
        # torch would have read this one.
        sys.modules["torch"].set_num_threads(int(threads))
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def _run(kind: str, target: str, args: list[str]) -> None:
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __annotations__={},
                         __loader__=importlib.machinery.BuiltinImporter)
    sys.modules["__main__"] = main
    if kind == "module":
        import runpy

        sys.argv = ["-m", *args]
        # What python -m runs (typeshed leaves the private function out).
        runpy._run_module_as_main(target, alter_argv=True)  # type: ignore[attr-defined]  # private
        return
    path = os.path.abspath(target)
    sys.argv = [target, *args]
    main.__dict__.update(__file__=path, __cached__=None,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", path))
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _user_frames(tb):
    """The traceback without the frames of this module (a fresh process has none)."""
    while tb is not None and tb.tb_frame.f_code.co_filename in _OURS:
        tb = tb.tb_next
    return tb


def _die_by_sigint() -> None:
    """An uncaught KeyboardInterrupt ends a fresh interpreter by SIGINT, after its
    normal shutdown."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]  # private: as the interpreter ends
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
