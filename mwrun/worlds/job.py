"""``mwrun.init()``: join every world of this process; ``Job``: hold and close them."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping

from mwrun import protocol
from mwrun.errors import BrokenWorldError, MwrunError
from mwrun.worlds import nccl as discipline
from mwrun.worlds import signals
from mwrun.worlds.supervisor_link import SupervisorLink
from mwrun.worlds.world import World, WorldClosed
from mwrun.worlds.worldspec import WorldSpec, from_environment

FORM_TIMEOUT = 300.0  # by hand, people start processes one terminal at a time


class Job:
    """The worlds of this process. ``job.world(name)`` or ``job.worlds[name]``."""

    def __init__(self, worlds: dict[str, World], link: SupervisorLink | None = None):
        self.worlds = worlds
        self._link = link

    def world(self, name: str) -> World:
        try:
            return self.worlds[name]
        except KeyError:
            known = ", ".join(self.worlds) or "none"
            raise MwrunError(f"no world named {name!r}; this process is in: {known}") from None

    def close(self) -> None:
        """Leave every world; the process can then exit normally."""
        for world in self.worlds.values():
            world.close()
        if self._link is not None:
            self._link.close()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Job {', '.join(repr(w) for w in self.worlds.values())}>"


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
    link = None
    if worlds is None:
        specs = from_environment(environ)
        control = environ.get("MWRUN_CONTROL")
        if control:
            interval = beat_interval(min(s.timeout for s in specs.values()),
                                     environ.get("MWRUN_HANG_TIMEOUT"))
            link = SupervisorLink(control, environ.get("MWRUN_PROCESS", str(os.getpid())), interval,
                                  nccl=discipline.version())
            link.start()
    else:
        specs = _specs(worlds)
    if not specs:
        raise MwrunError("no worlds to join")
    gpu_timeouts = [s.timeout for s in specs.values() if s.backend == "nccl"]
    if gpu_timeouts:  # before any group (and torch's threads) exists: see worlds/nccl.py
        discipline.ensure_env(max(gpu_timeouts))
    local_addr = environ.get("MWRUN_HOST_ADDR") if worlds is None else None
    incarnation = _incarnation(environ) if worlds is None else None
    joined = {name: World(name, spec, link=link, local_addr=local_addr,
                          incarnation=incarnation) for name, spec in specs.items()}
    if link is not None:
        link.worlds = joined  # its heartbeats carry their traffic
    deadline = time.monotonic() + (FORM_TIMEOUT if timeout is None else timeout)
    failures = _form_all(joined, deadline)
    if len(failures) == len(joined):
        for world in joined.values():
            world.close()
        if link is not None:
            link.close()
        first = next(iter(failures.values()))
        raise first
    for name, error in failures.items():
        why = error.reason if isinstance(error, BrokenWorldError) else error
        print(f"mwrun: world {name!r} did not form: {why}", file=sys.stderr)
    return Job(joined, link)


def _incarnation(environ) -> int | None:
    """Which start of this process the launcher made (MWRUN_INCARNATION), if it said."""
    try:
        return int(environ["MWRUN_INCARNATION"])
    except (KeyError, ValueError):
        return None


def _form_all(worlds: dict[str, World], deadline: float) -> dict[str, BaseException]:
    """Form every world, each in its own short-lived thread; returns the failures."""
    failures: dict[str, BaseException] = {}

    def form(world: World) -> None:
        while True:
            try:
                world._form(deadline)
                return
            except BrokenWorldError as exc:
                # A member died while forming: follow the world to its next generation,
                # unless the host closed it or time is up.
                if isinstance(exc, WorldClosed) or time.monotonic() >= deadline - 0.05:
                    failures[world.name] = exc
                    world._give_up(exc)
                    return
                time.sleep(0.05)  # not a poll: only between failed attempts
            except MwrunError as exc:
                failures[world.name] = exc
                return

    if len(worlds) == 1:
        form(next(iter(worlds.values())))
        return failures
    threads = [threading.Thread(target=form, args=(w,), name=f"mwrun-form-{w.name}")
               for w in worlds.values()]
    for thread in threads:
        signals.start(thread)
    for thread in threads:
        thread.join()
    return failures
