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

from mwrun.worlds import signals

STEP = 0.5  # how often a waiting thread looks whether its process exits
# Threads dropping an old generation's group, each with when it should have done: its
# world's timeout (a gloo worker stuck in an operation holds the destroy that long) and
# a slack. The exit hook waits that long, not less: a reaper still in C++ when the
# interpreter's teardown begins aborts the process as it returns ("terminate called
# without an active exception", seen once in a drained member's exit under CI load).
RELEASING: dict[threading.Thread, float] = {}
RELEASE_SLACK_S = 5.0
# Threads letting a generation go (a break, a removal), each with when it should have
# done. Once the error is visible, a caller may print it and exit while such a thread
# is still in torch's C++ (an abort, a store write) or has yet to hand the group to its
# reaper: the exit hook waits for these first (a drained member aborted so at exit).
LETTING_GO: dict[threading.Thread, float] = {}


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


def finish(running: Waits | set | dict, timeout: float = 2.0) -> None:
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


def release(group, timeout: float = 0.0) -> None:
    """Drop a generation's group without waiting for it.

    Destroying a gloo group joins its worker threads, and a worker can be stuck for up
    to the world's timeout in an operation gloo failed to abort; a short-lived thread
    takes that wait so that rejoin() and close() never do. ``timeout``: the world's.
    """
    def release() -> None:
        try:
            group.release()
        finally:
            RELEASING.pop(reaper, None)

    reaper = threading.Thread(target=release, name="mwrun-release", daemon=True)
    RELEASING[reaper] = time.monotonic() + timeout + RELEASE_SLACK_S
    signals.start(reaper)
    reaper.join(timeout=0.5)


EXIT_WAIT_MOST_S = 60.0  # a process never waits longer at exit for such threads


def left(running: dict[threading.Thread, float], least: float = 2.0) -> float:
    """Seconds until the last thread of ``running`` should have done, between ``least``
    and EXIT_WAIT_MOST_S: how long the exit hook gives them."""
    now = time.monotonic()
    return min(EXIT_WAIT_MOST_S,
               max([least, *(until - now for until in list(running.values()))]))


@contextlib.contextmanager
def letting_go(most: float):
    """The calling thread lets a generation go, for ``most`` seconds at most."""
    thread = threading.current_thread()
    mine = thread not in LETTING_GO  # a removal said by a break: counted once
    if mine:
        LETTING_GO[thread] = time.monotonic() + most
    try:
        yield
    finally:
        if mine:
            LETTING_GO.pop(thread, None)
