"""The world's store where this member hosts it (rank 0, by hand): starting it, ending it
before the interpreter's teardown, and what its peers make of it going (gone, lost).

Why the order matters: a thread that sits in torch's C++ with the GIL released (a
TCPStore being built, a store wait) and takes the GIL back while the interpreter is
being torn down is ended by ``pthread_exit``; its unwinding reaches torch's noexcept
frames (pybind11's ``gil_scoped_release``), ``std::terminate`` runs and the process
dies by SIGABRT ("terminate called without an active exception"). Ctrl-C while a
rejoin() waits in another thread did both, about one exit in three: the rejoin, still
letting go of the broken generation, hosted the store anew after close() had dropped
it, or dropped the old group (whose destructor releases the GIL) as Python exited.

So the store and the waits on it end while Python still runs (close(), or the exit
hook below), and once they have, nothing builds them again (worldstore.py); and
close() waits for a rejoin that holds the old group until it has handed it to its
reaper, which the exit hook waits for (``RELEASING``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import time
import weakref
from datetime import timedelta

import torch.distributed as dist

from mwrun import protocol
from mwrun.errors import BrokenWorldError, MwrunError, WorldEnded
from mwrun.worlds import backends
from mwrun.worlds.failures import summarize
from mwrun.worlds.interruptible import LETTING_GO, LETTING_GO_WAIT, RELEASING, finish, wake_all

log = logging.getLogger("mwrun")
HEARD_WAIT = 1.0  # seconds a leaving host waits for its peers to read that it leaves
_HOSTS: weakref.WeakSet = weakref.WeakSet()  # memberships whose store this process hosts


def serve(name: str, spec):
    """The world's store, served from this process (on its address only)."""
    try:
        fd = backends.store_listener(spec.addr, spec.port)  # not every interface
        server = dist.TCPStore(spec.addr, spec.port, None, True,
                               timeout=timedelta(seconds=spec.timeout),
                               wait_for_workers=False, master_listen_fd=fd)
    except (RuntimeError, OSError) as exc:
        raise MwrunError(f"world {name!r}: cannot host its store on"
                         f" {spec.addr}:{spec.port}: {summarize(exc)}") from None
    protocol.start(server)
    return server


def hosted(membership) -> None:
    """``membership`` hosts its world's store: the exit hook ends it (``at_exit()``)."""
    _HOSTS.add(membership)


def by_a_peer(spec) -> bool:
    """By hand, another member (rank 0) hosts the store: when it goes, so does the
    world. Under the launcher the supervisor hosts it, and outlives any member."""
    return spec.host_store is None and not spec.hosts_store


def lost(membership, generation: int, exc: BaseException) -> BrokenWorldError:
    """A store call failed for good (not a timeout): why the world broke."""
    if by_a_peer(membership.spec) and not membership.state.closed:
        return gone(membership, generation, 0, exc)
    return BrokenWorldError(membership.name, generation,
                            f"lost the world's store: {summarize(exc)}")


def gone(membership, generation: int, rank: int, exc: BaseException | None = None):
    """By hand, the member that hosted the store has gone (it left, or died): the world
    is over, since no one can meet without its store. It ends (WorldEnded) with one
    reason, and rejoin() raises the same at once rather than wait for a store that will
    not come back."""
    reason = protocol.store_host_gone(rank)
    if exc is not None:
        log.debug("%s: %s (%s)", membership.name, reason, summarize(exc))
    membership.state.host_over(WorldEnded(membership.name, generation, reason))
    membership.stores.forget()
    return membership.broke(generation, reason, publish=False, left=(rank,))


def leaving(server, generation: int, size: int, rank: int) -> None:
    """The host leaves (close(), or its exit): tell the others, in the store, before it
    goes with this process (protocol.host_leaves), for the generation they are in and
    the one they may be joining. Without it each would find a lost connection, and
    torch's client logs a C++ warning with a stack trace for every store wait that
    fails that way (see below)."""
    if size < 2:
        return
    with contextlib.suppress(RuntimeError, TimeoutError, ValueError):
        latest = int(protocol.text(server.get(protocol.GEN)))
        for gen in sorted({g for g in (generation, latest) if g >= 0}):
            protocol.host_leaves(server, gen, size, rank)
        if generation >= 0:
            _until_heard(server, protocol.heard_keys(generation, size, rank))


def _until_heard(server, keys: list[str]) -> None:
    """Until every peer's watcher has read it, for HEARD_WAIT at most (a dead peer never
    will). Checked, not waited for: a store wait that times out makes torch's C++ log
    two warnings of its own, and this runs as the process exits."""
    give_up = time.monotonic() + HEARD_WAIT
    while not server.check(keys) and time.monotonic() < give_up:
        time.sleep(0.01)


# Why mwrun does not silence that warning for a host that dies without a word (SIGKILL):
# torch's TCPStore client logs a failed wait (``recvValueWithTimeout failed``) through
# c10's logging, whose threshold (TORCH_CPP_LOG_LEVEL, read once when torch is imported)
# is one per process, with no per-call or per-thread setting; raising it would hide the
# user's own C++ warnings (NCCL's, their stores') for as long as a world is watched,
# which is always. So only the host that can speak (Ctrl-C, close(), its exit) is kept
# quiet, by speaking first; the peers of one that died say it in one line all the same.


@atexit.register
def _drop_stores() -> None:
    """At exit, while Python still runs: end the stores this process hosts and let the
    threads waiting on them finish. Dropped later, in the interpreter's teardown, they
    would wake those threads where they can no longer run, and the C++ runtime aborts."""
    # First the watchers still asleep in their stores (interruptible.ASLEEP); then the
    # threads letting a generation go (a removal, or a break, seen as the script ended):
    # they may still write the store, and hand a group to its reaper.
    wake_all()
    finish(LETTING_GO, LETTING_GO_WAIT)
    for membership in list(_HOSTS):
        membership.at_exit()  # a script that exits without close()
    finish(RELEASING)  # groups being dropped: their threads end in C++ too
