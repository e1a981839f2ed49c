"""``mwrun stacks`` at its edges: many asks at once, each answered; a bundle's asks
beside them; an answer too big for one line trimmed, never lost."""

import json
import re
import threading

from mwrun import stacktext
from mwrun.head.postmortem import stacks as head_stacks
from mwrun.head.serve import requests
from mwrun.protocol import MAX_LINE
from mwrun.worlds import stacks
from tests.unit.test_stacks import _rec


def _asks(clock):
    told = []
    return head_stacks.Stacks(lambda p, m: told.append((p, m)), lambda: clock[0],
                              new_id=iter(f"id{i}" for i in range(1000)).__next__), told


def test_every_ask_of_many_at_once_is_kept_while_it_is_read():
    clock = [0.0]
    asks, _ = _asks(clock)
    ids = [asks.ask([_rec("leader", pid=7)])["id"] for _ in range(12)]
    for rid in ids:
        asks.told(rid, "leader", 7, [{"name": "MainThread"}])
    assert all(asks.result(rid)["waiting"] == [] for rid in ids)


def test_a_bundle_s_asks_never_take_the_command_line_s_places():
    clock = [0.0]
    asks, _ = _asks(clock)
    mine = asks.ask([_rec("leader", pid=7)])["id"]
    bundles = [asks.start([_rec("leader", pid=7)]) for _ in range(2 * head_stacks.MAX_ASKS)]
    assert asks.result(mine) is not None
    asks.told(bundles[0].id, "leader", 7, [{"name": "MainThread"}])  # kept for its bundle
    assert bundles[0].members["leader"].told is not None
    assert asks.ask([_rec("leader", pid=7)]) is not None  # the command line's places are free


def test_asks_beyond_the_most_kept_are_refused_and_unread_ones_go():
    clock = [0.0]
    asks, told = _asks(clock)
    for _ in range(head_stacks.MAX_ASKS):
        assert asks.ask([_rec("leader", pid=7)]) is not None
    sent = len(told)
    assert asks.ask([_rec("leader", pid=7)]) is None and len(told) == sent  # nothing asked
    clock[0] += head_stacks.UNREAD / 2
    first = next(iter(asks.asks))
    asks.result(first)  # its asker still reads it
    clock[0] += head_stacks.UNREAD / 2 + 1
    assert asks.ask([_rec("leader", pid=7)]) is not None
    assert asks.result(first) is not None and len(asks.asks) == 2  # the others went


def _threads():
    frames = [[f"/very/long/path/{'d' * 300}/f{i}.py", i, f"fn{i}", "x" * 150]
              for i in range(64)]
    threads = [{"id": i, "name": f"worker-thread-{i}-" + "n" * 5000, "daemon": True,
                "main": False, "stack": frames, "call": None} for i in range(256)]
    threads[0] = {**threads[0], "main": True}
    threads[200] = {**threads[200], "call": {"world": "w", "call": "recv", "for_s": 3.0}}
    return threads


def test_an_answer_of_many_threads_with_long_names_is_trimmed_to_fit_and_says_so():
    threads = _threads()
    fitted = stacks.fit({"threads": threads})
    assert len(json.dumps(fitted)) <= stacks.MAX_BYTES
    kept = fitted["threads"]
    assert len(kept) == len(threads)
    assert all(len(t["name"]) <= stacks.MAX_NAME and t["cut"] for t in kept)
    assert all(t["stack"][-1][0].endswith("/f63.py") for t in kept)  # innermost frame kept
    assert fitted["trimmed"] == f"outer frames left out; names cut to {stacks.MAX_NAME}" \
                                " characters"
    message = {"verb": "stacks_told", "process": "p", "pid": 1, "id": "a", **fitted}
    assert requests.problem(message) is None and len(json.dumps(message)) < MAX_LINE
    shown = stacktext.render([{"process": "p", "pid": 1, "host": "h", "answered": True,
                               **fitted}])
    assert "its answer was trimmed to fit one message: outer frames left out" in shown


def test_threads_are_left_out_last_of_all_the_main_one_and_those_in_a_call_kept():
    threads = _threads()
    fitted = stacks.fit({"threads": threads}, limit=20_000)
    assert len(json.dumps(fitted)) <= 20_000
    kept = fitted["threads"]
    # what a hang shows stays (the main thread, the one in a call); then the first ones
    assert [t["id"] for t in kept] == [0, *range(1, len(kept) - 1), 200]
    left = len(threads) - len(kept)
    assert fitted["trimmed"].endswith(f"; {left} of {len(threads)} threads left out")


def test_a_dump_that_fits_is_never_marked_trimmed():
    told = {"threads": [{"name": "MainThread", "main": True, "stack": [["f.py", 1, "f", ""]],
                         "call": None}]}
    assert stacks.fit(told) == told


def test_a_process_of_more_threads_than_are_told_keeps_its_main_thread():
    release = threading.Event()
    extra = [threading.Thread(target=release.wait, name=f"a-{i}", daemon=True)
             for i in range(stacks.MAX_THREADS + 4)]  # "a-": before MainThread by name
    for thread in extra:
        thread.start()
    try:
        told = stacks.dump()
    finally:
        release.set()
        for thread in extra:
            thread.join()
    assert len(told["threads"]) == stacks.MAX_THREADS
    assert told["threads"][0]["main"]
    left, total = map(int, re.fullmatch(
        rf"(\d+) of (\d+) threads left out \(the most told is {stacks.MAX_THREADS}\)",
        told["trimmed"]).groups())
    assert left >= 4 and total - left == stacks.MAX_THREADS
