"""``mwrun drill --head`` (cli/drillhead.py): its own repeatable schedule that leaves
the faults' as they were, which runs may have their head killed, and how the kills
read in the drill's record and summary. Pure, real files."""

import pytest

from mwrun import runs
from mwrun.cli import drill as d
from mwrun.cli import drillhead, drillview
from mwrun.errors import UsageError
from mwrun.records.drills import problems
from mwrun.schema import TOPOLOGY


def test_the_head_kills_are_repeatable_and_leave_the_faults_schedule_alone():
    kills = list(drillhead.schedule(8, 5.0, 16.0))
    assert kills == list(drillhead.schedule(8, 5.0, 16.0)) and kills
    assert all(0 < k.at < 16.0 for k in kills)
    assert [k.at for k in kills] == sorted(k.at for k in kills)
    hit = {"w": [("a", 0)]}
    assert list(d.schedule(8, 3.0, 16.0, hit)) == list(d.schedule(8, 3.0, 16.0, hit))


@pytest.mark.parametrize(("extra", "said"), [
    ("", "has no head_grace: killing its head would end the job"),
    ("head_grace: 60\nhead_restart: false\n", "head_restart: false: nobody would start"),
])
def test_only_a_run_a_new_head_takes_back_may_have_its_head_killed(tmp_path, monkeypatch,
                                                                    extra, said):
    monkeypatch.setenv("MWRUN_HOME", str(tmp_path))
    folder = runs.run_path("r")
    folder.mkdir(parents=True)
    base = "version: 1\nprocesses:\n  a: {cmd: x}\nworlds:\n  w: {members: [a]}\n"
    (folder / TOPOLOGY).write_text(base + extra)
    with pytest.raises(UsageError, match=said):
        drillhead.check("r")
    (folder / TOPOLOGY).write_text(base + "head_grace: 60\n")
    drillhead.check("r")  # head_restart is on by default


def test_the_record_and_the_summary_say_how_long_the_run_was_headless():
    heads = drillhead.HeadKills("r")
    heads.kills = [{"at": 1.0, "pid": 5, "epoch": 1, "back": 0.25, "new_epoch": 2},
                   {"at": 20.0, "pid": 6, "epoch": 2, "back": 0.35, "new_epoch": 3}]
    record = heads.record()
    assert (record["kills"], record["back_median"], record["back_max"], record["not_back"]) \
        == (2, 0.3, 0.35, 0)
    drill = {"started": 0.0, "ended": 30.0, "worlds": {}, "kept_faulted": None,
             "kept_others": None, "skipped": [], "not_recovered": [], "head": record}
    assert "  head: killed 2 time(s); a new head had the run 300 ms after the kill" \
           " (median), max 350 ms" in drillview.lines(drill)
    assert problems(drill) == []
    heads.kills.append({"at": 40.0, "pid": 7, "epoch": 3, "back": None})
    assert problems({**drill, "head": heads.record()}) == [
        "no new head came back after 1 of the head's kills"]
