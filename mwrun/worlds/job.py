"""``mwrun.init()``: join every world of this process; ``Job``: hold them, hear what
changes them, add and remove worlds, and ask the supervisor to scale the job."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Mapping

from mwrun import protocol
from mwrun.errors import BrokenWorldError, MwrunError
from mwrun.protocol import Verb, WorldReport
from mwrun.worlds import forming, orders, signals
from mwrun.worlds import nccl as discipline
from mwrun.worlds.events import EventQueue
from mwrun.worlds.roster import Roster
from mwrun.worlds.state import WorldClosed
from mwrun.worlds.supervisor_link import SupervisorLink
from mwrun.worlds.world import World
from mwrun.worlds.worldspec import WorldSpec, from_environment

FORM_TIMEOUT = 300.0  # by hand, people start processes one terminal at a time
SCALE_WAIT = 10.0  # seconds job.scale waits for the supervisor's answer
_COUNT = re.compile(r"[+-]?\d+")


class Job:
    """The worlds of this process. ``job.world(name)`` or ``job.worlds[name]``.

    ``job.worlds`` is the live set, a fresh dict each time it is read. ``job.events()``
    and ``job.aevents()`` yield what changes the worlds (``mwrun.WorldEvent``), in the
    order it happened; each event is consumed once, by whichever consumer takes it.
    Made by ``mwrun.init``.
    """

    def __init__(self, *, process: str | None = None, control: str | None = None,
                 interval: float = 1.0, local_addr: str | None = None,
                 incarnation: int | None = None, nccl: str | None = None):
        self._process = process  # its name under the launcher (MWRUN_PROCESS)
        self._local_addr = local_addr
        self._incarnation = incarnation
        self._events = EventQueue()
        self._roster = Roster(self._events)
        self._closed = False
        self._link = None
        if control is not None:  # built with what it serves: these worlds, their orders
            self._link = SupervisorLink(control, process or str(os.getpid()), interval,
                                        worlds=self._roster.snapshot, on_order=self._follow,
                                        nccl=nccl)
            self._link.start()  # its orders may come at once: they find the job whole

    @property
    def worlds(self) -> dict[str, World]:
        return self._roster.snapshot()

    def world(self, name: str) -> World:
        return self._roster.live(name)

    def events(self, timeout: float | None = None):
        """The worlds' events as they happen; the iteration ends once none came for
        ``timeout`` seconds (0: those queued now; None: when the job closes)."""
        return self._events.iterate(timeout)

    def aevents(self):
        """``events()`` for asyncio (``async for event in job.aevents()``): never blocks
        the event loop; ends when the job closes."""
        return self._events.aiterate()

    def add_world(self, name: str, spec: WorldSpec, timeout: float | None = None) -> World:
        """Join one more world now (by hand, or one of this process's own making under
        the launcher: the supervisor does not know it); returns once it has formed,
        raises as ``init`` does if it cannot. Posts ``added``."""
        world = self._world(name, _specs({name: spec})[name], supervised=False)
        self._roster.claim(world)  # MwrunError if the job has that name already
        deadline = time.monotonic() + (FORM_TIMEOUT if timeout is None else timeout)
        error = forming.form(world, deadline)
        if error is None and self._roster.formed(world):
            return world
        self._roster.drop(world)
        world.close()
        raise _plainly(error or MwrunError(f"world {name!r}: the job closed while it formed"))

    def remove_world(self, name: str) -> None:
        """Leave world ``name`` now (as ``world.close()``: its peers see it end) and drop
        it from ``job.worlds``. Posts ``removed``."""
        world = self._roster.live(name)
        world.close()
        self._roster.drop(world)

    def scale(self, process: str, n: int | str) -> dict:
        """Ask the supervisor to run ``n`` replicas of ``process`` (an int, or "+K" /
        "-K"); returns its answer. Under ``mwrun launch`` only."""
        if self._link is None:
            raise MwrunError("job.scale needs a job started by 'mwrun launch' (it asks"
                             " the supervisor)")
        count = _count(n)
        reply = self._link.request({"verb": Verb.SCALE, "process": self._process,
                                    "pid": os.getpid(), "target": process, "count": count},
                                   SCALE_WAIT)
        if reply is None:
            raise MwrunError(f"the supervisor did not answer the scale of {process} to"
                             f" {count} within {SCALE_WAIT:g}s")
        if not reply.ok:
            raise MwrunError(reply.error or f"the supervisor refused to scale {process}")
        return dict(reply.fields)

    def close(self) -> None:
        """Leave every world; the process can then exit normally."""
        self._closed = True
        for world in self._roster.everything():
            world.close()
        self._events.close()
        if self._link is not None:
            self._link.close()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Job {', '.join(repr(w) for w in self.worlds.values())}>"

    # -- inside: the worlds init forms, and those the head adds ----------------------------

    def _world(self, name: str, spec: WorldSpec, supervised: bool) -> World:
        """A world of this job (``supervised``: one the launcher or the head gave)."""
        return World(name, spec, link=self._link, process=self._process,
                     local_addr=self._local_addr if supervised else None,
                     incarnation=self._incarnation if supervised else None,
                     tell=self._roster.tell)

    def _form_initial(self, specs: dict[str, WorldSpec], deadline: float):
        worlds = {name: self._world(name, spec, True) for name, spec in specs.items()}
        for world in worlds.values():
            self._roster.enter(world)
        return forming.form_all(worlds, deadline)

    def _follow(self, order: orders.Order) -> None:
        """An order from the head (on the link's thread: nothing here blocks)."""
        if isinstance(order, orders.Drain):
            self._roster.drain(order.world, order.generation)
        elif isinstance(order, orders.Slow):
            self._roster.slow(order.world, order.generation, order.member, order.lag_s)
        elif isinstance(order, orders.Late):
            with contextlib.suppress(MwrunError):  # gone meanwhile: nothing to be late to
                self._roster.live(order.world).be_late(order.delay, order.hold)
        elif isinstance(order, orders.Add) and not self._closed \
                and not self._roster.knows(order.world):  # a repeated add changes nothing
            world = self._world(order.world, order.spec, supervised=True)
            try:
                self._roster.claim(world)
            except MwrunError:
                return
            signals.start(threading.Thread(target=self._adopt, args=(world,),
                                           name=f"mwrun-add-{world.name}", daemon=False))

    def _adopt(self, world: World) -> None:
        """Form a world the head added, in a thread of its own; it enters the job once
        formed. One that cannot form (closed meanwhile) is dropped quietly."""
        error = forming.form(world, time.monotonic() + FORM_TIMEOUT)
        if error is None and self._roster.formed(world):
            if self._link is not None:
                self._link.world_event(world.name, world.generation, WorldReport.ADDED)
            return
        self._roster.drop(world)
        world.close()
        if error is not None and not self._closed and isinstance(error, BrokenWorldError) \
                and not isinstance(error, WorldClosed):
            print(f"mwrun: world {world.name!r} did not form: {error.reason}", file=sys.stderr)


def _plainly(error: BaseException) -> BaseException:
    """A world that could not form, raised from the user's call: its reason says why,
    and the frames of mwrun's forming threads behind it would only bury that line in
    the user's traceback (a bug, not an MwrunError, keeps them)."""
    if isinstance(error, MwrunError):
        error.__suppress_context__ = True
        return error.with_traceback(None)
    return error


def _count(n) -> str:
    """job.scale's ``n`` as the supervisor reads it: "6", "+1", "-2"."""
    if isinstance(n, bool) or not isinstance(n, int | str) or \
            (isinstance(n, str) and not _COUNT.fullmatch(n)) or (isinstance(n, int) and n < 0):
        raise MwrunError(f"scale to a number of replicas (6) or a change (\"+1\", \"-2\"),"
                         f" not {n!r}")
    return str(n)


def _specs(worlds) -> dict[str, WorldSpec]:
    specs = {}
    for name, spec in worlds.items():
        if isinstance(spec, Mapping):
            spec = WorldSpec(**spec)
        if not isinstance(spec, WorldSpec):
            raise MwrunError(f"world {name!r}: give a mwrun.WorldSpec, not {type(spec).__name__}")
        specs[name] = spec
    return specs


def beat_interval(timeout: float, hang_timeout: str | None) -> float:
    """Seconds between heartbeats (protocol.beat_interval) for MWRUN_HANG_TIMEOUT's text."""
    try:
        hang = float(hang_timeout) if hang_timeout else float("inf")
    except ValueError:
        hang = float("inf")
    return protocol.beat_interval(timeout, hang)


def init(worlds: Mapping[str, WorldSpec] | None = None, *, timeout: float | None = None) -> Job:
    """Join every world of this process and return when each has formed.

    With no arguments, the worlds come from ``mwrun launch`` (``MWRUN_WORLDS``). By
    hand, name them: ``init(worlds={"world1": WorldSpec(rank=0, size=2, port=29501)})``;
    rank 0 of each world then hosts its store.

    Worlds form in parallel, so a slow member of one world does not hold up another.
    A world that cannot form (its member failed for good, or ``timeout`` seconds pass,
    by default 300) is returned broken, with the reason, so the other worlds still
    work; ``init`` raises only if no world formed at all.
    """
    environ = os.environ
    supervised = worlds is None
    specs = from_environment(environ) if supervised else _specs(worlds)
    if not specs:
        raise MwrunError("no worlds to join")
    control = environ.get("MWRUN_CONTROL") if supervised else None
    job = Job(process=environ.get("MWRUN_PROCESS") if supervised else None,
              control=control or None,
              interval=beat_interval(min(s.timeout for s in specs.values()),
                                     environ.get("MWRUN_HANG_TIMEOUT")),
              local_addr=environ.get("MWRUN_HOST_ADDR") if supervised else None,
              incarnation=_incarnation(environ) if supervised else None,
              nccl=discipline.version() if control else None)
    gpu_timeouts = [s.timeout for s in specs.values() if s.backend == "nccl"]
    if gpu_timeouts:  # before any group (and torch's threads) exists: see worlds/nccl.py
        discipline.ensure_env(max(gpu_timeouts))
    deadline = time.monotonic() + (FORM_TIMEOUT if timeout is None else timeout)
    failures = job._form_initial(specs, deadline)
    if len(failures) == len(specs):
        job.close()
        raise _plainly(next(iter(failures.values())))
    for name, error in failures.items():
        why = error.reason if isinstance(error, BrokenWorldError) else error
        print(f"mwrun: world {name!r} did not form: {why}", file=sys.stderr)
    return job


def _incarnation(environ) -> int | None:
    """Which start of this process the launcher made (MWRUN_INCARNATION), if it said."""
    try:
        return int(environ["MWRUN_INCARNATION"])
    except (KeyError, ValueError):
        return None
