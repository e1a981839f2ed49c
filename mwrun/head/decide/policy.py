"""Restart and failure decisions: pure functions of a spec and a history."""

from __future__ import annotations

from dataclasses import dataclass

from mwrun import protocol

BACKOFF_CAP = 30.0  # seconds; a crash loop still retries twice a minute at worst
# A restarted process that has rejoined its worlds and stays up this long is healthy
# again: its next failure is a new fault, restarted at once, not part of a crash loop.
STABLE_AFTER = 5.0


@dataclass(frozen=True)
class Exit:
    """How a process ended."""

    code: int | None  # the exit status; None if it could not start at all
    hung: str | None = None  # why the supervisor killed it as hung, if it did
    start_error: str | None = None  # why it could not start
    lost: str | None = None  # its host was lost ("host NAME lost")
    # A drill signalled this start of it: a fault whatever the exit code (a graceful
    # worker exits 0 on a drill's SIGTERM, and is restarted all the same).
    drilled: bool = False

    @property
    def clean(self) -> bool:
        return self.code == 0 and not self.hung and not self.drilled

    def describe(self, name: str) -> str:
        if self.start_error:
            return f"{name} could not start: {self.start_error}"
        if self.lost:
            return f"{name} failed: {self.lost}"
        if self.hung:
            return f"{name} hung ({self.hung}) and was killed"
        if self.code is None:
            return f"{name} exited with code {self.code}"
        if self.code == 0 and self.drilled:
            return f"{name} exited normally on a drill's signal"
        return protocol.exit_reason(name, self.code)


@dataclass(frozen=True)
class Decision:
    restart: bool
    delay: float = 0.0
    why: str = ""


def backoff(first: float, loop: int) -> float:
    """The delay before the next restart when ``loop`` restarts of the current crash
    loop are behind: none for the first, then first, 2*first, 4*first ... capped."""
    if loop <= 0 or first <= 0:
        return 0.0
    return min(first * 2 ** (loop - 1), BACKOFF_CAP)


def crash_loop(loop: int, joined_at: float | None, now: float, drilled: bool = False) -> int:
    """The restarts of the current crash loop when a process ends: over (0) once it had
    rejoined its worlds (``joined_at``) and stayed up STABLE_AFTER seconds, or when a
    drill's signal ended it (``drilled``: the fault came from outside, so it says
    nothing of a process that cannot stay up; a chaos drill that hits one worker twice
    in a few seconds measures a recovery, not a backoff)."""
    if drilled or (joined_at is not None and now - joined_at >= STABLE_AFTER):
        return 0
    return loop


def after_exit(policy: str, max_restarts: int, first_backoff: float, restarts_done: int,
               exit: Exit, loop: int = 0) -> Decision:
    """Whether and when a process that ended is started again: ``restarts_done`` counts
    against max_restarts, ``loop`` (see crash_loop) sets the delay. A drill's fault
    (``exit.drilled``) is a failure whatever its exit code, and its restart spends none
    of max_restarts, so it is never refused for want of them."""
    if exit.start_error:
        return Decision(False, why="a command that cannot start is not retried")
    if policy == "never":
        return Decision(False, why="not restarted (restart: never)")
    if policy == "on-failure" and exit.clean:
        return Decision(False, why="it exited normally")
    if exit.drilled:
        return Decision(True, backoff(first_backoff, loop),
                        f"restart after a drill's fault (none of max_restarts: {max_restarts}"
                        " spent)")
    if restarts_done >= max_restarts:
        return Decision(False, why=f"no restarts left (max_restarts: {max_restarts})")
    return Decision(True, backoff(first_backoff, loop),
                    f"restart {restarts_done + 1} of {max_restarts}")


def restart_text(restarts: int, spent: int, max_restarts: int, drilled: bool) -> str:
    """Which restart a process is making: the ``spent``-th of its max_restarts, or (its
    ``restarts``-th in all) one after a drill's fault, which spends none."""
    if drilled:
        return f"restart {restarts}, after a drill's fault: none of max_restarts spent"
    return f"restart {spent} of {max_restarts}"


def stops_the_job(on_failure: str, exit: Exit) -> bool:
    """A world with on_failure: stop ends the job when a member fails (not on a clean exit)."""
    return on_failure == "stop" and not exit.clean
