"""Blocking store calls that Ctrl-C and the process's exit can still end.

A thread blocked in a torch store call hears neither Ctrl-C (Python runs signal
handlers between its own steps, in the main thread) nor its process exiting (the
interpreter waits for such threads when the call runs in one). Waits that may last
(forming a world, rejoin) run here instead, and so does dropping a group, which can
block as long.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from typing import Protocol

from mwrun.worlds import signals

STEP = 0.5  # how often a waiting thread looks whether its process exits
RELEASING: set[threading.Thread] = set()  # threads dropping an old generation's group
# Threads letting a generation go (a break, a removal). Once the error is visible, a
# caller may print it and exit while such a thread is still in torch's C++ (an abort, a
# store write) or has yet to hand the group to its reaper; a thread of ours that comes
# back from C++ once the interpreter's teardown has begun aborts the process ("terminate
# called without an active exception": a drained member, CI pair 12). The exit hook
# waits for these first, LETTING_GO_WAIT at most.
LETTING_GO: set[threading.Thread] = set()
LETTING_GO_WAIT = 5.0
WAKE_WAIT = 2.0  # seconds the exit hook gives the sleepers it wakes (a store round trip)


class Sleeper(Protocol):
    def wake(self) -> threading.Thread | None:
        """Wake the thread asleep in a store wait, if it is; that thread, to join."""


# Threads asleep in a store wait that only a write ends (a world's watcher, on its wake
# key). The exit hook wakes each while Python still runs: a peer that ends at the same
# moment has the world broken, and a sleeper woken by that during the interpreter's
# teardown comes back from torch's C++ where it can no longer run (SIGABRT).
ASLEEP: weakref.WeakSet[Sleeper] = weakref.WeakSet()


class Waits:
    """The store waits of one world in flight, each in its own thread.

    Once ended (the world closed, or the process exits) none starts any more: a wait
    started after the store it waits on has gone could sit in torch's C++ with the GIL
    released until the interpreter is being torn down, and a daemon thread that takes
    the GIL back then is ended by ``pthread_exit``, whose unwinding through torch's
    noexcept frames calls ``std::terminate`` (the process dies by SIGABRT).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self.ended = False

    def start(self, thread: threading.Thread) -> bool:
        """Start ``thread`` as one of these waits; False (not started) once ended."""
        with self._lock:
            if self.ended:
                return False
            self._threads.add(thread)
            signals.start(thread)  # under the lock: end() sees every thread started
        return True

    def discard(self, thread: threading.Thread) -> None:
        with self._lock:
            self._threads.discard(thread)

    def end(self) -> list[threading.Thread]:
        """No wait starts from now on; returns those still running."""
        with self._lock:
            self.ended = True
            return list(self._threads)


def interruptible(exiting, running: Waits, fn, *args):
    """``fn(*args)`` (a blocking store call) in a daemon thread, waited for here.

    A wait on an Event hears Ctrl-C and the process exiting (then it raises
    ``exiting()``); either way the store call is left behind in its daemon thread,
    which dies with the process. ``running`` holds the thread while it runs: whoever
    ends the store must let it finish (``finish``) before Python shuts down, as a
    thread that wakes in torch's C++ after that aborts the process. Once ``running``
    has ended, nothing starts: this raises ``exiting()`` at once.
    """
    outcome: dict = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc
        running.discard(thread)
        done.set()

    thread = threading.Thread(target=run, name="mwrun-wait", daemon=True)
    if not running.start(thread):
        raise exiting()
    while not done.wait(STEP):
        if not threading.main_thread().is_alive():  # the interpreter is exiting
            raise exiting()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def finish(running: Waits | set, timeout: float = 2.0) -> None:
    """Wait a moment for the threads of ``running``, whose store has just gone (and,
    for ``Waits``, start no more). A thread of a plain set is added just before it
    starts, from any thread: one not started yet is given the same moment to start
    (joining it before then is an error)."""
    deadline = time.monotonic() + timeout
    threads = running.end() if isinstance(running, Waits) else list(running)
    for thread in threads:
        while thread.ident is None and time.monotonic() < deadline:
            time.sleep(0.01)  # being started by another thread right now
        if thread.ident is not None:
            thread.join(max(deadline - time.monotonic(), 0.0))


def release(group) -> None:
    """Drop a generation's group without waiting for it.

    Destroying a gloo group joins its worker threads, and a worker can be stuck for up
    to the world's timeout in an operation gloo failed to abort; a short-lived thread
    takes that wait so that rejoin() and close() never do.
    """
    def release() -> None:
        group.release()
        RELEASING.discard(reaper)

    reaper = threading.Thread(target=release, name="mwrun-release", daemon=True)
    RELEASING.add(reaper)
    signals.start(reaper)
    reaper.join(timeout=0.5)


@contextlib.contextmanager
def letting_go():
    """The calling thread lets a generation go (in LETTING_GO until it is done)."""
    thread = threading.current_thread()
    LETTING_GO.add(thread)
    try:
        yield
    finally:
        LETTING_GO.discard(thread)


def wake_all(timeout: float = WAKE_WAIT) -> None:
    """At exit: wake every sleeper and let its thread end, ``timeout`` at most. The
    writes go from a thread of their own: a store that does not answer (its host
    stopped) holds up the exit no longer than that."""
    sleepers = list(ASLEEP)
    if not sleepers:
        return
    deadline = time.monotonic() + timeout
    woken: list[threading.Thread] = []

    def wake() -> None:
        for sleeper in sleepers:
            with contextlib.suppress(Exception):  # one that cannot be woken: the next
                thread = sleeper.wake()
                if thread is not None:
                    woken.append(thread)

    waker = threading.Thread(target=wake, name="mwrun-wake", daemon=True)
    signals.start(waker)
    waker.join(timeout)
    for thread in list(woken):
        thread.join(max(deadline - time.monotonic(), 0.0))
