"""When the head's machine starts a new head (host/headrestart.py): at once after a
death, with a doubling backoff in a crash loop, never after TRIES quick deaths in a row.
Pure: a scripted clock and a fake start."""

from mwrun.host.headrestart import BACKOFF, QUICK, TRIES, HeadRestart


class Child:
    def __init__(self):
        self.code = None

    def poll(self):
        return self.code


def restart():
    started = []

    def start(run_dir):
        started.append(Child())
        return started[-1]
    return HeadRestart("/runs/x", start), started


def test_a_head_that_died_is_started_again_at_once():
    heads, started = restart()
    heads.tick(0.0, away=False)
    assert started == []  # nothing is due while the head lives
    heads.lost(10.0)
    heads.tick(10.0, away=True)
    assert len(started) == 1 and heads.due_at is None
    heads.tick(10.5, away=True)
    assert len(started) == 1  # one at a time


def test_a_crash_loop_backs_off_and_gives_up():
    heads, started = restart()
    now, waits = 0.0, []
    heads.lost(now)
    while heads.due_at is not None:
        now = heads.due_at
        heads.tick(now, away=True)  # started
        heads.adopted(now + 1)  # it adopted the run ...
        now += 2  # ... and died soon after (within QUICK): a crash loop
        started[-1].code = 1
        heads.lost(now)
        heads.tick(now, away=True)  # (reaped)
        waits.append(None if heads.due_at is None else heads.due_at - now)
    assert QUICK > 2
    assert waits == [BACKOFF * 2 ** n for n in range(TRIES - 1)] + [None]
    assert len(started) == TRIES  # given up: the grace runs out


def test_a_head_that_ends_without_adopting_counts_as_a_turn_of_the_loop():
    heads, started = restart()
    heads.lost(0.0)
    heads.tick(0.0, away=True)
    started[-1].code = 1  # (another head took the run, or it failed)
    heads.tick(0.5, away=True)
    assert heads.due_at == 0.5 + BACKOFF


def test_a_head_that_lived_long_starts_the_count_again():
    heads, _ = restart()
    heads.lost(0.0)
    heads.tick(0.0, away=True)
    heads.adopted(1.0)
    heads.lost(1.0 + QUICK + 1)
    assert heads.due_at == 1.0 + QUICK + 1 and heads.loop == 0
