"""The exit hook wakes the watchers still asleep in their stores and lets their threads
end (interruptible.wake_all), never for longer than its bound: a store that does not
answer (its host stopped) must not hold up the process's exit."""

import threading
import time

from mwrun.worlds import interruptible


class Sleeper:
    def __init__(self, answers: threading.Event | None = None):
        self.asleep = threading.Event()
        self.answers = answers  # None: the store answers at once
        self.thread = threading.Thread(target=self.asleep.wait, daemon=True)
        self.thread.start()

    def wake(self):
        if self.answers is not None:
            self.answers.wait()  # a store write that does not come back
        self.asleep.set()
        return self.thread


def test_every_sleeper_is_woken_and_its_thread_joined(monkeypatch):
    sleepers = [Sleeper(), Sleeper()]
    monkeypatch.setattr(interruptible, "ASLEEP", set(sleepers))
    interruptible.wake_all(timeout=30)
    assert not any(s.thread.is_alive() for s in sleepers)


def test_a_store_that_does_not_answer_holds_the_exit_no_longer_than_the_bound(monkeypatch):
    never = threading.Event()
    stuck = Sleeper(never)
    monkeypatch.setattr(interruptible, "ASLEEP", {stuck})
    began = time.monotonic()
    try:
        interruptible.wake_all(timeout=0.2)
        assert stuck.thread.is_alive()  # not woken: the exit went on without it
        assert time.monotonic() - began < 30  # bounded (the bound is 0.2 s)
    finally:
        never.set()


def test_nothing_asleep_starts_nothing(monkeypatch):
    monkeypatch.setattr(interruptible, "ASLEEP", set())
    before = threading.active_count()
    interruptible.wake_all()
    assert threading.active_count() == before
