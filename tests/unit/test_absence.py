"""An agent's view of its head's absence (host/absence.py): pure, on a fake clock."""

import json

from mwrun.host.absence import KEEP, Absence
from mwrun.host.frames import Kind


def absence(tmp_path, grace):
    clock, wall = [100.0], [5000.0]
    note = tmp_path / "head-away.json"
    return Absence(grace, str(note), lambda: clock[0], lambda: wall[0]), clock, wall, note


def test_without_a_grace_the_heads_end_is_the_jobs_as_before(tmp_path):
    gone, _, _, note = absence(tmp_path, 0.0)
    assert gone.begin("its link closed") is False
    assert not gone.away and gone.due() is None and not note.exists()


def test_with_a_grace_the_job_goes_on_until_it_runs_out_and_the_note_says_so(tmp_path):
    gone, clock, wall, note = absence(tmp_path, 30.0)
    assert gone.begin("its link closed") is True
    assert gone.away and gone.due() == 130.0
    said = json.loads(note.read_text())
    assert (said["since"], said["grace"], said["stopped"]) == (5000.0, 30.0, None)
    assert gone.begin("15s of silence") is True  # once away, it stays the first why
    assert gone.why == "its link closed"
    clock[0], wall[0] = 129.9, 5029.9
    assert not gone.over(clock[0])
    clock[0], wall[0] = 130.0, 5030.0
    assert gone.over(clock[0])
    gone.end(clock[0])
    said = json.loads(note.read_text())
    assert said["stopped"] == 5030.0
    assert said["reason"] == ("no head came back within head_grace (30s) after its link"
                              " closed: every process stopped")


def test_an_agent_told_to_end_before_the_grace_ran_out_says_so(tmp_path):
    gone, clock, _, note = absence(tmp_path, 30.0)
    gone.begin("its link closed")
    gone.end(clock[0] + 3)
    assert json.loads(note.read_text())["reason"] == (
        "its head's machine's agent was told to end (SIGTERM: mwrun stop, or the machine)"
        " while the head was away (its link closed): every process stopped")


def test_nothing_is_noted_when_the_head_was_never_away(tmp_path):
    gone, clock, _, note = absence(tmp_path, 30.0)
    gone.end(clock[0])
    assert not note.exists()


def test_what_a_new_head_would_hear_is_kept_up_to_a_bound_and_the_rest_counted(tmp_path):
    gone, _, _, _ = absence(tmp_path, 30.0)
    gone.begin("its link closed")
    assert gone.keep(Kind.LINES, KEEP - 1) and gone.dropped == 0
    assert not gone.keep(Kind.LINES, KEEP) and not gone.keep(Kind.CAPTURED, KEEP + 10)
    assert gone.dropped == 2
    # Vital, and few: a library's words among them (a new head learns its worlds so).
    for kind in (Kind.EXITED, Kind.SPAWNED, Kind.FAILED, Kind.SAY, Kind.CONTROL):
        assert gone.keep(kind, 10 * KEEP)
    assert gone.dropped == 2
    assert not gone.keep(Kind.CONTROL, 0, beats=True)  # heartbeats: none, not counted
    assert gone.dropped == 2


def test_a_run_folder_gone_under_the_agent_costs_it_nothing(tmp_path):
    gone = Absence(5.0, str(tmp_path / "missing" / "head-away.json"), lambda: 0.0,
                   lambda: 0.0)
    assert gone.begin("its link closed") and gone.away
    gone.end(10.0)


def test_an_agent_srun_started_is_told_where_to_note_the_absence_later(tmp_path):
    """Under Slurm the head's machine's agent starts before the run folder exists: the
    head's ``secret`` frame tells it the note's path (host/asks.py); a path it had
    from the start is never replaced."""
    clock, wall = [100.0], [5000.0]
    gone = Absence(30.0, None, lambda: clock[0], lambda: wall[0])
    note = tmp_path / "head-away.json"
    gone.noted(str(note))
    gone.noted(str(tmp_path / "another.json"))
    assert gone.begin("its link closed") is True
    assert json.loads(note.read_text())["since"] == 5000.0
    assert not (tmp_path / "another.json").exists()
