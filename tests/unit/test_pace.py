"""Pace from the worlds' own counts over exact windows: a known pace and a known
outage driven through a history, and the numbers the report gives back."""

import pytest

from mwrun.cli.summaryview import summary
from mwrun.records import build
from mwrun.records import counts as pace

WORLDS = {"world1": ["leader", "worker-0"], "world2": ["leader", "worker-1"]}
PACE = 10.0  # calls/s of both worlds while up
KILL, FORMED, FIRST_CALL = 10.5, 12.5, 12.6  # world1's outage


def world1_count(t):
    """world1's calls by t: PACE while up; nothing from the kill to its first call."""
    if t <= KILL:
        return PACE * t
    return PACE * KILL + PACE * max(0.0, t - FIRST_CALL)


def history(with_phases=False, end=25.0):
    """The records of a run: both worlds at PACE from t=0, world1 killed at KILL and
    back at FIRST_CALL. Beats arrive 0.3 s before each one-second sample."""
    records = [{"t": 0.0, "event": "start", "run_id": "r", "name": "star", "worlds": WORLDS},
               {"t": 0.0, "event": "form", "world": "world1", "generation": 0},
               {"t": 0.0, "event": "form", "world": "world2", "generation": 0},
               {"t": KILL, "event": "signal", "process": "worker-0", "signal": "SIGKILL",
                "why": "drill"},
               {"t": KILL + 0.02, "event": "break", "world": "world1", "generation": 0,
                "reason": "worker-0 was killed by SIGKILL"},
               {"t": 11.0, "event": "spawn", "process": "worker-0", "pid": 9, "restarts": 1},
               {"t": FORMED, "event": "form", "world": "world1", "generation": 1}]
    if with_phases:
        records.append({"t": FIRST_CALL + 0.01, "event": "fault", "world": "world1",
                        "generation": 0, "process": "worker-0", "signal": "SIGKILL",
                        "cause": "drill", "phases": {
                            "t_fault": KILL, "exit_seen": KILL + 0.01,
                            "survivors_told": KILL + 0.02, "restarted": 11.0,
                            "reformed": FORMED, "first_call": FIRST_CALL}})
    t = 1.0
    while t <= end:
        heard = t - 0.3
        records.append({"t": t, "rates": {"world1": [PACE, 40.0], "world2": [PACE, 40.0]},
                        "calls": {"world1": [round(world1_count(heard)), heard],
                                  "world2": [round(PACE * heard), heard]}})
        t += 1.0
    return sorted(records, key=lambda r: r["t"])


def test_a_known_pace_and_outage_read_back_exactly():
    tl = build(history(with_phases=True), [], "r")
    [fault] = tl.faults
    assert fault.start == KILL and fault.back == FIRST_CALL
    assert fault.downtime(tl.last) == pytest.approx(FIRST_CALL - KILL)
    counts, downs = tl.counts["world1"], tl.downs("world1")
    assert pace.pace(counts, downs, 0.5, KILL) == pytest.approx(PACE)  # before
    assert pace.pace(counts, downs, KILL, FIRST_CALL) == 0.0  # down the whole window
    assert pace.pace(counts, downs, 11.0, 12.0) == 0.0
    assert pace.pace(counts, downs, FIRST_CALL, 22.6) == pytest.approx(PACE)  # after
    # over a window holding the outage: its calls over its whole length
    assert pace.pace(counts, downs, 5.0, 20.0) == pytest.approx(PACE * (15 - 2.1) / 15)
    other = tl.counts["world2"]
    assert pace.pace(other, tl.downs("world2"), KILL, FIRST_CALL) == pytest.approx(PACE)
    text = "\n".join(summary(tl))
    assert "world1: before 10.0 calls/s (40B/s), during 0.0 calls/s" in text
    assert "after 10.0 calls/s (40B/s)" in text
    assert "meanwhile world2: 10.0 calls/s (40B/s) before, 10.0 calls/s (40B/s) during" \
           " (kept its pace)" in text
    assert "phases: exit_seen +10 ms, survivors_told +20 ms, restarted +500 ms," \
           " reformed +2.00 s, first_call +2.10 s" in text


def test_without_phases_the_outage_runs_from_the_kill_to_the_re_form():
    tl = build(history(), [], "r")
    [fault] = tl.faults
    assert fault.phases is None and fault.back == FORMED
    assert pace.pace(tl.counts["world1"], tl.downs("world1"), KILL, FORMED) == 0.0
    assert "phases" not in "\n".join(summary(tl))


def test_the_picture_draws_no_traffic_inside_a_down_band():
    tl = build(history(with_phases=True), [], "r")
    edges, values = pace.steps(tl.counts["world1"], tl.downs("world1"))
    assert len(edges) == len(values) + 1
    inside = [v for a, b, v in zip(edges, edges[1:], values, strict=False)
              if a >= KILL and b <= FIRST_CALL]
    assert inside and all(v == 0.0 for v in inside)
    assert max(values) == pytest.approx(PACE, rel=0.2)


def test_a_restarted_members_count_never_makes_the_world_go_back():
    records = history()
    for r in records:  # a history spliced from two heads: a count that went back
        if r.get("t") == 20.0:
            r["calls"]["world2"][0] = 3
    tl = build(records, [], "r")
    counts = [c for _, c in tl.counts["world2"]]
    assert counts == sorted(counts)


def test_down_time_counts_overlapping_spans_once():
    assert pace.down_within(0.0, 10.0, [(1.0, 3.0), (2.0, 4.0), (9.0, 12.0)]) == 4.0
    assert pace.count_at([(0.0, 0.0), (2.0, 10.0)], [], 3.0) is None  # no guess beyond


def remade_history():
    """pair-3 at 10 calls/s from 0 to 20 s (200 calls), removed at 20 s (a scale down),
    made again at 30 s (a scale up) and formed at 31 s, then at 10 calls/s counting
    from 0 again: at 40 s its new count (90) is still below the old one's (200)."""
    worlds = {"pair-3": ["frontend", "worker-3"]}
    records = [{"t": 0.0, "event": "start", "run_id": "r", "name": "serve", "worlds": worlds},
               {"t": 0.0, "event": "form", "world": "pair-3", "generation": 0},
               {"t": 20.0, "event": "remove", "world": "pair-3", "reason": "drained"},
               {"t": 30.0, "event": "add", "world": "pair-3",
                "members": ["frontend", "worker-3"]},
               {"t": 31.0, "event": "form", "world": "pair-3", "generation": 0}]
    records += [{"t": t + 0.3, "calls": {"pair-3": [PACE * t, t]}} for t in range(1, 20)]
    records += [{"t": t + 0.3, "calls": {"pair-3": [PACE * (t - 31), t]}}
                for t in range(32, 41)]
    return sorted(records, key=lambda r: r["t"])


def test_a_world_made_again_counts_on_from_its_old_count():
    """Its count starting from 0 again is a reset (Prometheus' rate()), never a count
    held at the old one's until the new world's passes it."""
    tl = build(remade_history(), [], "r")
    counts, downs = tl.counts["pair-3"], tl.downs("pair-3")
    assert counts[-1] == (40.0, 190.0 + PACE * 9)  # the old 190 seen, then 90 more
    assert pace.pace(counts, downs, 32.0, 40.0) == pytest.approx(PACE)
    assert pace.pace(counts, downs, 20.0, 31.0) == 0.0  # removed: down until it formed
    edges, values = pace.steps(counts, downs)
    after = [v for a, v in zip(edges, values, strict=False) if a >= 32.0]
    assert after and all(v == pytest.approx(PACE) for v in after)


def test_a_count_that_goes_down_is_a_reset_and_a_new_heads_first_count_a_base():
    records = [{"t": 0.0, "event": "start", "run_id": "r", "name": "star", "worlds": WORLDS},
               {"t": 1.0, "calls": {"world1": [100, 1.0]}},
               {"t": 2.0, "calls": {"world1": [5, 2.0]}},  # reset: 5 new calls
               {"t": 3.0, "calls": {"world1": [15, 3.0]}},
               {"t": 4.0, "event": "start", "run_id": "r", "name": "star", "worlds": WORLDS},
               {"t": 5.0, "calls": {"world1": [400, 5.0]}},  # a new head's: a base
               {"t": 6.0, "calls": {"world1": [410, 6.0]}}]
    tl = build(records, [], "r")
    assert [c for _, c in tl.counts["world1"]] == [0.0, 100.0, 105.0, 115.0, 115.0, 125.0]
