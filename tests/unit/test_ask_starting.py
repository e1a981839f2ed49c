"""A request to a run that is still starting (its folder names the control socket
before its supervisor listens) waits for it, saying so once; never for one that is
gone, nor past START_WAIT."""

import pytest

from mwrun import runs
from mwrun.errors import NotListening

STARTING = {"state": "starting", "control": "/x.sock", "supervisor_pid": 1}


def _run(monkeypatch, answers, states, alive=True):
    """``answers``: each try's reply, or None (not listening); ``states``: each look at
    state.json."""
    tries, looks = iter(answers), iter(states)

    def request(path, message, timeout=10.0, check=True):
        reply = next(tries)
        if reply is None:
            raise NotListening("its supervisor is not running (no one answers on /x.sock)")
        return reply
    monkeypatch.setattr(runs, "request", request)
    monkeypatch.setattr(runs, "read_state", lambda run_id: next(looks))
    monkeypatch.setattr(runs, "supervisor_alive", lambda state: alive)
    said, clock = [], [0.0]

    def sleep(seconds):
        clock[0] += seconds

    def ask():
        return runs.ask("r", STARTING, {"verb": "stop"}, say=said.append,
                        clock=lambda: clock[0], sleep=sleep)
    return ask, said, clock


def test_it_waits_while_the_run_starts_and_says_so_once(monkeypatch):
    ask, said, _ = _run(monkeypatch, [None, None, None, {"ok": True}], [STARTING] * 3)
    assert ask() == {"ok": True}
    assert said == ["run r is starting; waiting for its supervisor to listen"]


def test_a_run_that_has_just_left_starting_is_tried_once_more(monkeypatch):
    ask, said, _ = _run(monkeypatch, [None, {"ok": True}], [{**STARTING, "state": "running"}])
    assert ask() == {"ok": True} and said == []


@pytest.mark.parametrize(("states", "alive"), [
    ([{**STARTING, "state": "failed"}], True),  # it ended before it listened
    ([STARTING], False),  # its supervisor has gone
])
def test_it_never_waits_for_a_run_that_will_not_listen(monkeypatch, states, alive):
    ask, said, _ = _run(monkeypatch, [None, None], states, alive)
    with pytest.raises(NotListening, match="its supervisor is not running"):
        ask()
    assert said == []


def test_it_gives_up_after_start_wait(monkeypatch):
    ask, said, clock = _run(monkeypatch, [None] * 10_000, [STARTING] * 10_000)
    with pytest.raises(NotListening):
        ask()
    assert runs.START_WAIT <= clock[0] <= runs.START_WAIT + 1 and len(said) == 1
