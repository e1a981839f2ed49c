"""The library's side of fencing: a stale copy of a rank is refused before it arrives,
and could only ever meet itself (protocol.py, ``admit``; worlds/fencing.py)."""

import pytest

from mwrun import protocol
from mwrun.worlds import fencing


class Store:
    """The few store calls fencing makes, over a dict."""

    def __init__(self):
        self.keys = {}

    def multi_set(self, keys, values):
        self.keys.update(zip(keys, (v.encode() for v in values), strict=True))

    def set(self, key, value):
        self.keys[key] = value.encode()

    def check(self, keys):
        return all(k in self.keys for k in keys)

    def multi_get(self, keys):
        return [self.keys[k] for k in keys]


class Ended(Exception):
    pass


@pytest.fixture
def ends(monkeypatch):
    def end(code):
        raise Ended(code)
    monkeypatch.setattr(fencing.os, "_exit", end)


def test_the_admitted_copy_joins_under_the_admitted_names():
    store = Store()
    protocol.open_next(store, 0, [1, 3])
    assert store.keys[protocol.GEN] == b"1"
    assert fencing.admitted(store, "w", 1, 1, 2, 3) == [1, 3]
    assert protocol.pg_prefix(1, [1, 3]) == "mwrun/g1/pg/1.3/"


def test_a_stale_copy_is_refused_and_ends(ends, capsys):
    store = Store()
    protocol.open_next(store, 0, [1, 3])
    with pytest.raises(Ended) as ended:
        fencing.admitted(store, "w", 1, 1, 2, 2)  # rank 1's second start; the third is in
    assert ended.value.args == (fencing.STALE_EXIT,)
    assert "stale copy of rank 1 of world 'w' (incarnation 2; generation 1 admits" \
        " incarnation 3" in capsys.readouterr().err


def test_a_copy_that_slipped_through_names_another_key_space():
    """By construction: each member names the group's key space with its own
    incarnation in its rank's place, so a stale copy never meets the admitted ones."""
    store = Store()
    protocol.start(store, [1, 1])
    admitted_names = protocol.pg_prefix(0, fencing.admitted(store, "w", 0, 1, 2, 1))
    stale_names = protocol.pg_prefix(0, [1, 7])
    assert admitted_names != stale_names


def test_by_hand_nothing_is_fenced():
    store = Store()
    protocol.start(store)  # no admit keys: rank 0 hosts the store itself
    assert fencing.admitted(store, "w", 0, 1, 2, None) is None
    assert fencing.admitted(store, "w", 0, 1, 2, 5) is None
    assert protocol.pg_prefix(0, None) == "mwrun/g0/pg/"
