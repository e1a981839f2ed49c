"""Keeping the process's signals for its main thread.

On Linux the kernel hands a signal sent to the process (Ctrl-C's SIGINT, a SIGTERM) to
any thread that does not block it. Python runs its handlers in the main thread only,
and only once that thread runs again: caught by another thread, the signal does not
interrupt the main thread's wait, so a main thread idle in a wait without a timeout (an
asyncio loop with nothing scheduled, a join) sleeps on and the Ctrl-C seems lost. Every
thread mwrun starts, and every thread torch starts for it (a store's server loop,
gloo's workers: they copy the signal mask of the thread that creates them), therefore
blocks these signals, so that they reach the main thread and wake it.
"""

from __future__ import annotations

import contextlib
import signal
import threading

# Delivered to the process, handled by Python programs; never the synchronous faults.
ASYNC = frozenset(getattr(signal, name) for name in (
    "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD",
    "SIGWINCH") if hasattr(signal, name))


@contextlib.contextmanager
def blocked():
    """Block ASYNC in this thread for the block: threads started in it keep them
    blocked. Used around starting threads and building stores and groups."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def blocked_off_main():
    """``blocked()`` in any thread but the main one (whose waits Ctrl-C must end)."""
    if threading.current_thread() is threading.main_thread():
        return contextlib.nullcontext()
    return blocked()


def start(thread: threading.Thread) -> threading.Thread:
    """Start ``thread`` with ASYNC blocked in it (and in whatever it starts)."""
    with blocked():
        thread.start()
    return thread
