"""How a world forms, breaks and re-forms: keys in the world's own store.

Every world has one store (a torch TCPStore), hosted by the supervisor under
``mwrun launch`` or by rank 0 when run by hand. All of mwrun's keys live under
``mwrun/``; each generation N of the world has its own key space ``mwrun/gN/``, so a
re-formed world never meets the keys of an earlier one (torchrun's restarts fail on
exactly that):

``mwrun/gen``
    The generation members should join. The store's host writes it: 0 when it
    creates the store, N+1 when it opens the next generation.
``mwrun/gN/admit/R``
    The incarnation of rank R's process that generation N admits (fencing; written
    only under the launcher). Every start of a process has an incarnation, the head's
    count of its starts, handed to it as ``MWRUN_INCARNATION``. The host writes every
    admit key of a generation *before* it names that generation in ``mwrun/gen``
    (and for generation 0 before the store is served), so a member that can see a
    generation can see whom it admits. The host knows them when it opens the
    generation: a member that is alive is admitted as it is, one being restarted as
    its next start (the head's count plus one): no generation waits on a start.
    A member whose own incarnation is not the one admitted is a stale copy (its host
    stalled and was replaced while it kept running): it is refused before it sets its
    arrival key, says so on stderr and ends. Its calls in the generation are impossible
    by construction all the same: the group's key space (``pg``) is named after the
    admitted incarnations, and each member names it with its *own* incarnation in its
    rank's place, so a stale copy could only ever meet itself. Only the store's host
    (the head) writes these keys; members only read them. By hand there are none, and
    nothing is fenced.
``mwrun/gN/size``
    The world's size as the first member to arrive in generation N gave it ("SIZE
    RANK"). Every member compares its own size with it (compare-and-set) before it
    sets its arrival key. By hand each member is told the size on its own, and they
    may disagree: the one that finds another size closes the generation at once with
    a reason that starts with ``MISFIT`` and says who said what (``misfit``), so no
    member waits for a rank that will never come, nor builds a group its peers cannot
    join. Under the launcher the host names the members (``members``): sizes agree.
``mwrun/gN/arrive/R``
    Each member sets its own arrival key, then waits for all of them before it
    builds its process group, so the (slow, uninterruptible) rendezvous of the group
    starts only when every member is there. Setting a key is idempotent, so a member
    that gave up waiting can simply come again. Breaking or closing a generation sets
    every arrival key too, so no one waits for a member that will not come.
``mwrun/gN/pg/`` (or ``mwrun/gN/pg/I0.I1.../`` under the launcher)
    The key space the generation's torch process group rendezvouses in, named after
    the incarnations it admits (see ``admit``).
``mwrun/gN/forming/R``
    While rank R builds its group (over a store connection of its own), a thread of
    its waits on this key; breaking the generation sets it, and the thread then shuts
    that connection down, so a rendezvous waiting for a peer that died after arriving
    fails at once rather than at the world's timeout (mwrun.worlds.formguard). The
    member sets it itself when its build ends, to end that thread.
``mwrun/gN/broken``
    Why generation N broke. Written once (compare-and-set) by whoever notices
    first: the supervisor when a member exits or hangs, a member whose call failed, or
    the by-hand host when its store connection to a member fails.
``mwrun/gN/wake/R``
    One key per rank. Each member runs one light watcher thread per world that
    blocks in ``store.wait`` on its own wake key (no polling). Breaking a world sets
    every wake key, so every member learns of the break within a store round trip,
    even one whose main thread is busy elsewhere. A member that closes sets only its
    own key, to end its watcher.
``mwrun/gN/left/R``
    Rank R closed the world (finished). It breaks nothing by itself (a peer may still
    be reading R's last message); a peer whose next call fails finds the marker and
    says so, instead of quoting the socket error.
``mwrun/gN/next``
    The host's decision after a break: ``open`` (generation N+1 may form: ``gen`` is
    N+1 already) or ``closed: REASON`` (the world will not re-form, e.g. its failed
    member has no restarts left). ``World.rejoin()`` waits for it.
``mwrun/gN/ended``
    Written with ``closed: ...`` when the world closes because a member finished
    (exited 0, not restarted): the world ended, nothing broke, and members say so.
``mwrun/gN/host_left``
    By hand only: the rank that hosted the store left (Ctrl-C, ``job.close()``, its
    exit), taking the store with it. Written with ``closed: ...`` just before the store
    goes, so the others end the world with that one reason ("its store host, rank 0,
    has gone"), not with torch's report of a lost connection; a host that dies without
    a word is read the same way from the lost connection.
``mwrun/gN/heard/R``
    By hand only: rank R's watcher has read ``host_left`` and will not touch the store
    again. The leaving host waits for these (briefly, bounded: a peer may be dead)
    before its store closes, so no member's store call fails on the way out.
``mwrun/gN/members``
    Under the launcher: the processes of generation N, by rank, comma-joined
    (``worker-0,frontend``). The host writes it with the admit keys, before it names
    the generation, so a member joining N learns its rank and the world's size there:
    a world's membership can change from one generation to the next (elastic jobs).
    A member whose process is not among them was removed from the world: for it the
    world is closed (``mwrun.WorldClosedError``), not broken.
``mwrun/gN/removed``
    Written with ``closed: ...`` when the world itself is removed (its replica was
    drained, ``mwrun scale``/``mwrun drain``): it closes on purpose, nothing broke.
    Members raise ``mwrun.WorldClosedError``, not ``BrokenWorldError``.

A *resize* (a member added to or removed from a world that lists a scaled process
bare) is a break of the current generation with a reason that starts with
``resized`` (``RESIZED``), written after the next generation's admit and members keys:
members see one ``BrokenWorldError`` saying so, and ``rejoin()`` returns with their
new rank and the new size. A member woken by it checks the next generation's
``members``: without its name there, it was the one removed.

Hangs are caught two ways: every call carries the world's timeout (never the backend's
30-minute default), and under the launcher a heartbeat thread lets the supervisor
notice a stopped process; it then kills the process, which breaks the world as above.
A third: a member whose abort of a broken world's communicator does not return within
its deadline sends the supervisor the world event ``abort_hung`` (``WorldReport.ABORT_HUNG``); the
supervisor kills it as hung, and its restart policy applies.
"""

from __future__ import annotations

import signal
from datetime import timedelta
from enum import Enum

PREFIX = "mwrun/"
FIRST_INCARNATION = 1  # a process's first start; each start after it counts one more
GEN = PREFIX + "gen"
OPEN = "open"
CLOSED = "closed: "


class _Word(str, Enum):
    """A word of the wire: a str (``verb == "hello"``, JSON writes its value) that
    prints as its value (enum.StrEnum, from Python 3.11 only)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return self.value.__format__(spec)


class WorldReport(_Word):
    """What the library tells its supervisor of one world (the ``event`` of a ``world``
    message: worlds/supervisor_link.py), the one spelling on both sides."""

    READY = "ready"  # joined the generation
    CLOSED = "closed"  # left it for good (finished)
    BROKEN = "broken"  # saw it break
    ABORT_HUNG = "abort_hung"  # its abort of a broken world did not return (worlds/aborts.py)
    ADDED = "added"  # a world the head added formed here (head/observe/scaleops.py)
    RELEASED = "released"  # it lets a draining world go (world.release())



class Verb(_Word):
    """The ``verb`` of a line between a library and its supervisor, either way."""

    # up: the library to the head (on the control socket, or relayed by an agent)
    HELLO = "hello"
    HEARTBEAT = "heartbeat"
    WORLD = "world"  # a WorldReport
    BYE = "bye"
    SCALE = "scale"  # job.scale: answered down as a REPLY
    STACKS_TOLD = "stacks_told"  # the answer to a STACKS
    # down: the head to the library (worlds/orders.py)
    ADD = "add"
    DRAIN = "drain"
    REPLY = "reply"
    STACKS = "stacks"
    SLOW = "slow"  # the member a world waits for, or none any more (head/observe/slowwatch.py)
    LATE = "late"  # be late to every call of a world for a while (a drill's slow member)


# The library's own verbs, which an agent relays from its host; of them, all but SCALE
# get no answer (the head's answer to a job.scale goes down as a REPLY).
LIBRARY_VERBS = frozenset({Verb.HELLO, Verb.HEARTBEAT, Verb.WORLD, Verb.BYE, Verb.SCALE,
                           Verb.STACKS_TOLD})
NO_REPLY = LIBRARY_VERBS - {Verb.SCALE}

# The longest JSON line between a library and its supervisor, either way (its end not
# counted): a longer one is dropped, and a client that sends one with it.
MAX_LINE = 1 << 20

# Heartbeats (the library to its supervisor): the plan checks a topology's timeouts
# against the same cadence the library keeps (plan/timeouts.py).
BEATS_PER_HANG = 5
MIN_BEAT = 0.05
MAX_BEAT = 5.0  # an idle job keeps its supervisor idle


# ``kill_world`` with signal SLOW (a drill's slow member, no fault): one member comes
# ``delay`` seconds late to every call of the world for ``for`` seconds; the defaults,
# and the most either may be (a delay past the calls' timeout would break the world).
SLOW = "SLOW"
LATE_DELAY = 0.02
LATE_FOR = 30.0
MAX_LATE_DELAY = 10.0
MAX_LATE_FOR = 86400.0

# A heartbeat's ``times`` (per world, per operation): a blocking call's time counted in
# fixed buckets, whose upper bounds in seconds (Prometheus' ``le``) run from a call on a
# fast link (0.1 ms) to one that waited out a slow peer (10 s), fine where calls take
# (1-2.5-5 steps to 0.1 s), coarse past it (a scrape carries every bucket of every
# world and operation: 128 processes' cost a scrape 25 % less than with 16); then a
# count above them all, then the calls' seconds added up. Fixed, so every member's and
# every restart's counts add up bucket by bucket (one histogram per world, operation).
CALL_TIME_BOUNDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                    0.1, 1.0, 10.0)


def beat_interval(call_timeout: float, hang_timeout: float) -> float:
    """Seconds between a process's heartbeats: five per hang deadline (and per call
    timeout, as before hang_timeout existed), at most one per 5 s."""
    return max(MIN_BEAT, min(MAX_BEAT, call_timeout / BEATS_PER_HANG,
                             hang_timeout / BEATS_PER_HANG))


def exit_reason(name: str, code: int) -> str:
    """Why a member's worlds broke when it exited with ``code`` (a Popen returncode:
    -N for signal N), as the head and, while it is away, an agent write it."""
    if code < 0:
        try:
            return f"{name} was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"{name} was killed by signal {-code}"
    return f"{name} exited normally" if code == 0 else f"{name} exited with code {code}"


def key(generation: int, name: str) -> str:
    return f"{PREFIX}g{generation}/{name}"


def group_name(world: str, generation: int) -> str:
    """A generation's process group as torch's Flight Recorder names it ("world1-g3"):
    given by the library when it makes the group, read back by the head's bundles."""
    return f"{world}-g{generation}"


def pg_prefix(generation: int, incarnations: list[int] | None = None) -> str:
    if incarnations is None:
        return key(generation, "pg/")
    return key(generation, "pg/" + ".".join(str(i) for i in incarnations) + "/")


def admit_keys(generation: int, size: int) -> list[str]:
    return [key(generation, f"admit/{r}") for r in range(size)]


def admit(store, generation: int, incarnations: list[int]) -> None:
    """Host: generation ``generation`` admits exactly these incarnations, by rank."""
    store.multi_set(admit_keys(generation, len(incarnations)),
                    [str(i) for i in incarnations])


def admitted(store, generation: int, size: int) -> list[int] | None:
    """The incarnations a generation admits, or None where none were written (by hand)."""
    keys = admit_keys(generation, size)
    if not store.check(keys):
        return None
    return [int(text(v)) for v in store.multi_get(keys)]


def wake_key(generation: int, rank: int) -> str:
    return key(generation, f"wake/{rank}")


def forming_key(generation: int, rank: int) -> str:
    return key(generation, f"forming/{rank}")


def text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def start(store, incarnations: list[int] | None = None,
          members: list[str] | None = None) -> None:
    """The host's first act: generation 0 is the one to join (admitting these
    incarnations, under the launcher: every process's first start; naming these
    members, by rank)."""
    _open(store, 0, incarnations, members)
    store.set(GEN, "0")


def _open(store, generation: int, incarnations: list[int] | None,
          members: list[str] | None) -> None:
    """What a generation's members must find before anyone can see it named."""
    if incarnations is not None:
        admit(store, generation, incarnations)
    if members is not None:
        store.set(key(generation, "members"), ",".join(members))


def members(store, generation: int) -> list[str] | None:
    """The processes of ``generation`` by rank, or None where none were written (by
    hand, or a host from before elastic jobs)."""
    k = key(generation, "members")
    return text(store.get(k)).split(",") if store.check([k]) else None


def arrival_keys(generation: int, size: int) -> list[str]:
    return [key(generation, f"arrive/{r}") for r in range(size)]


MISFIT = "its members disagree on its size"  # a misfit's reason starts with it


def first_size(store, generation: int, rank: int, size: int) -> tuple[int, int]:
    """(size, rank) of the first member to arrive in ``generation``: this one's
    own, if it is the first."""
    said = text(store.compare_set(key(generation, "size"), "", f"{size} {rank}"))
    first_size, first_rank = said.split()
    return int(first_size), int(first_rank)


def misfit(store, generation: int, sizes: dict[int, int]) -> str:
    """Close ``generation`` because its members gave these sizes (by rank); returns
    the reason. Every arrival key any of them waits for is set, so none waits on."""
    said = ", ".join(f"rank {rank} says {size}" for rank, size in sorted(sizes.items()))
    reason = f"{MISFIT}: {said}"
    close(store, generation, max(sizes.values()), reason)
    return reason


def is_misfit(reason: str | None) -> bool:
    return reason is not None and reason.startswith(MISFIT)


def mark_broken(store, generation: int, size: int, reason: str) -> str:
    """Break generation ``generation``; returns the reason that won (the first one)."""
    won = text(store.compare_set(key(generation, "broken"), "", reason))
    wake = [wake_key(generation, r) for r in range(size)] + arrival_keys(generation, size) \
        + [forming_key(generation, r) for r in range(size)]
    store.multi_set(wake, ["broken"] * len(wake))
    return won


def leave(store, generation: int, rank: int) -> None:
    store.set(key(generation, f"left/{rank}"), "1")


def who_left(store, generation: int, size: int) -> list[int]:
    return [r for r in range(size) if store.check([key(generation, f"left/{r}")])]


def broken_reason(store, generation: int) -> str | None:
    k = key(generation, "broken")
    return text(store.get(k)) if store.check([k]) else None


def open_next(store, generation: int, incarnations: list[int] | None = None,
              members: list[str] | None = None) -> None:
    """Host: after generation N broke, let N+1 form (admitting these incarnations,
    naming these members)."""
    _open(store, generation + 1, incarnations, members)
    store.set(GEN, str(generation + 1))
    store.set(key(generation, "next"), OPEN)


RESIZED = "resized"  # the reason of a resize's break starts with it


def resized(old: int, new: int) -> str:
    """The reason members see when their world is resized."""
    return f"{RESIZED}: {old} -> {new} members; rejoin() joins it at its new size"


def is_resize(reason: str | None) -> bool:
    return reason is not None and reason.startswith(RESIZED)


def resize(store, generation: int, size: int, incarnations: list[int],
           members: list[str], reason: str) -> None:
    """Host: generation N (of ``size`` members) ends for a new membership, N+1: its
    admit and members keys first, then the break that wakes N's members, then N+1
    named (a woken member finds its new rank, or that it was removed)."""
    _open(store, generation + 1, incarnations, members)
    mark_broken(store, generation, size, reason)
    store.set(GEN, str(generation + 1))
    store.set(key(generation, "next"), OPEN)


def remove(store, generation: int, size: int, reason: str) -> None:
    """Host: the world closes for good on purpose (drained): members raise
    WorldClosedError with ``reason``."""
    store.set(key(generation, "removed"), "1")
    close(store, generation, size, reason)


def removed(store, generation: int) -> bool:
    return bool(store.check([key(generation, "removed")]))


def close(store, generation: int, size: int, reason: str, ended: bool = False) -> None:
    """Host: generation N is the last; rejoin() raises with this reason. ``ended``: a
    member finished (exited 0 for good), so the world ended rather than broke."""
    if ended:
        store.set(key(generation, "ended"), "1")
    store.set(key(generation, "next"), CLOSED + reason)
    mark_broken(store, generation, size, reason)


def store_host_gone(rank: int) -> str:
    return f"its store host, rank {rank}, has gone"


def host_leaves(store, generation: int, size: int, rank: int) -> None:
    """By hand, the member that hosts the store (rank 0) leaves, and the store with it:
    the world is over for the others. Said in the store before its connections close,
    so that each member's watcher wakes with the reason rather than a lost connection."""
    store.set(key(generation, "host_left"), str(rank))
    close(store, generation, size, store_host_gone(rank))


def heard_keys(generation: int, size: int, host: int) -> list[str]:
    return [key(generation, f"heard/{r}") for r in range(size) if r != host]


def heard(store, generation: int, rank: int) -> None:
    """A member's watcher has read host_left: it will not touch the store again."""
    store.set(key(generation, f"heard/{rank}"), "1")


def ended(store, generation: int) -> bool:
    return bool(store.check([key(generation, "ended")]))


def host_left(store, generation: int) -> int | None:
    """The rank of the store's host if it left during ``generation`` (host_leaves)."""
    k = key(generation, "host_left")
    return int(text(store.get(k))) if store.check([k]) else None


def wait_value(store, k: str, timeout: float) -> str:
    """Block until key ``k`` exists (raises the store's error on timeout)."""
    store.wait([k], timedelta(seconds=max(timeout, 0.001)))
    return text(store.get(k))
