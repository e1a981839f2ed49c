"""One head at a time (head/epochs.py): each head takes the next epoch exclusively;
not while the newest one's head lives (unless forced); a head that sees a newer epoch
is stale and says which head has the run. Real files, real processes."""

import json
import os
import stat
import subprocess
import sys

import pytest

from mwrun.errors import RunError, StaleHead
from mwrun.head import epochs
from mwrun.schema import EPOCHS, SECRET


def test_each_head_takes_the_next_epoch_once(tmp_path):
    assert epochs.current(tmp_path) == 0
    assert epochs.take(tmp_path, why="launch") == 1
    assert (tmp_path / EPOCHS / "1").read_text() == f"{os.getpid()}\nlaunch\n"
    assert epochs.take(tmp_path) == 2  # our own pid holds 1: a head may take after itself
    assert epochs.current(tmp_path) == 2


def test_not_while_the_head_of_the_newest_epoch_lives(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / EPOCHS).mkdir()
        (tmp_path / EPOCHS / "1").write_text(f"{holder.pid}\n")
        with pytest.raises(RunError, match=f"has a head: pid {holder.pid} \\(epoch 1\\)"):
            epochs.take(tmp_path)
        assert epochs.take(tmp_path, force=True) == 2  # taken from a head stopped or hung
    finally:
        holder.kill()
        holder.wait()
    (tmp_path / EPOCHS / "3").write_text(f"{holder.pid}\n")  # its head is gone now
    assert epochs.take(tmp_path) == 4


def test_of_two_heads_that_want_the_same_epoch_one_gets_it(tmp_path, monkeypatch):
    (tmp_path / EPOCHS).mkdir()
    real = epochs.current
    # The other head made epoch 1 between our look and our take:
    monkeypatch.setattr(epochs, "current", lambda run_dir: 0)
    (tmp_path / EPOCHS / "1").write_text("4242\n")
    with pytest.raises(RunError, match="another head took epoch 1 of this run first"
                                       " \\(its pid: 4242\\)"):
        epochs.take(tmp_path)
    monkeypatch.setattr(epochs, "current", real)


RACER = """
import json, os, sys, time
from pathlib import Path
from mwrun.errors import RunError
from mwrun.head import epochs
run, go = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
took = []
for _ in range(1000):
    try:
        took.append(epochs.take(run))
    except RunError:
        pass
print(json.dumps(took), flush=True)
sys.stdin.read()  # alive, holding what it took, until the test has looked
"""


def test_two_heads_racing_never_both_hold_the_run(tmp_path):
    """Two live heads take epochs as fast as they can: once one holds the run, the
    other never takes an epoch after it (an epoch file read before its holder was
    written into it once let both adopt)."""
    go = tmp_path / "go"
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), str(go)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        go.touch()
        lines = [r.stdout.readline() for r in racers]
    finally:
        for racer in racers:
            racer.communicate("", timeout=30)
    took = [json.loads(line) for line in lines]
    assert sorted(len(t) > 0 for t in took) == [False, True], took
    winner = next(t for t in took if t)
    assert winner == list(range(1, 1001))
    held = {int(n): (tmp_path / EPOCHS / n).read_text().split()[0]
            for n in os.listdir(tmp_path / EPOCHS)}
    assert sorted(held) == winner  # nothing beside them (the files written aside went)
    assert set(held.values()) == {str(r.pid) for r in racers if took[racers.index(r)]}


def test_a_head_meets_the_fence_once_a_newer_epoch_exists(tmp_path):
    assert epochs.take(tmp_path) == 1
    fence = epochs.Fence(tmp_path, 1)
    fence.check()  # nothing new: nothing said
    fence.check()
    (tmp_path / EPOCHS / "2").write_text("4343\n")
    with pytest.raises(StaleHead, match="a newer head \\(epoch 2, pid 4343\\) adopted this"
                                        " run; this head \\(epoch 1\\) changes nothing"):
        fence.check()
    assert StaleHead.exit_code == 3


def test_a_head_that_handed_the_run_over_is_told_so(tmp_path):
    assert epochs.take(tmp_path) == 1
    fence = epochs.Fence(tmp_path, 1)
    (tmp_path / EPOCHS / "2").write_text(f"4444\n{epochs.HANDOVER}\n")
    with pytest.raises(StaleHead, match="handed over to a new head \\(pid 4444, epoch 2") \
            as told:
        fence.check()
    assert told.value.handed


def test_the_secret_is_the_owners_alone_and_made_once(tmp_path):
    made = epochs.make_secret(tmp_path)
    assert epochs.secret(tmp_path) == made and len(made) == 64
    assert stat.S_IMODE(os.stat(tmp_path / SECRET).st_mode) == 0o600
    with pytest.raises(FileExistsError):
        epochs.make_secret(tmp_path)
    with pytest.raises(RunError, match="has no secret"):
        epochs.secret(tmp_path / "missing")


def test_a_head_that_handed_over_waits_until_the_new_head_has_the_run(tmp_path):
    """``await_successor``: on until the new head's state.json no longer says it
    adopts, or the new head died, or the limit (a fake clock: no real wait)."""
    (tmp_path / "epochs").mkdir()
    (tmp_path / "epochs" / "1").write_text(f"{os.getpid()}\nlaunch\n")
    (tmp_path / "epochs" / "2").write_text(f"{os.getpid()}\nrestart-head\n")
    now, slept = [0.0], []

    def sleep(s):
        slept.append(s)
        now[0] += s

    state = tmp_path / "state.json"
    state.write_text(json.dumps({"epoch": 2, "head": {"state": "adopting"}}))
    epochs.await_successor(tmp_path, 1, 1.0, lambda: now[0], sleep)
    assert now[0] >= 1.0  # adopting all along: the limit
    slept.clear()
    state.write_text(json.dumps({"epoch": 2, "state": "running"}))
    epochs.await_successor(tmp_path, 1, 1.0, lambda: now[0], sleep)
    assert slept == []  # taken: at once
    state.write_text(json.dumps({"epoch": 2, "head": {"state": "adopting"}}))
    (tmp_path / "epochs" / "2").write_text("999999999\nrestart-head\n")  # (no such pid)
    epochs.await_successor(tmp_path, 1, 1.0, lambda: now[0], sleep)
    assert slept == []  # the new head died: nothing to wait for
