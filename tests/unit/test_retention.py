"""Every record a run keeps has a bound: post-mortem bundles (each world's first and
latest kept, the others by count and size), the plan's revisions (rotated like the
history, the newest file led by a summary that still gives the plan as it is), and
which finished runs ``mwrun clean`` chooses (pure)."""

from __future__ import annotations

import json

import pytest

from mwrun import runs
from mwrun.head.decide import events as ev
from mwrun.head.observe.revisions import RevisionLog, summed
from mwrun.head.postmortem import shelf
from mwrun.head.postmortem.shelf import Kept, Shelf, beyond
from mwrun.records import DEFAULT_KEEP, Entry, cleanable, parse_age
from tests.unit.test_postmortem import supervised

# -- post-mortem bundles -------------------------------------------------------------------


def kept(*worlds: str, size: int = 40) -> list[Kept]:
    return [Kept(w, shelf.Path(f"{w}-{i}"), size) for i, w in enumerate(worlds)]


def names(bundles: list[Kept]) -> list[str]:
    return [str(b.folder) for b in bundles]


def test_each_worlds_first_and_latest_bundle_stay_and_the_oldest_others_go():
    bundles = kept("a", "a", "b", "a", "a", "b", "a", "a")
    # a's first (0) and latest (7), b's first (2) and latest (5) stay whatever the bound
    assert names(beyond(bundles, between=2, limit=10**6)) == ["a-1", "a-3"]
    assert names(beyond(bundles, between=0, limit=10**6)) == ["a-1", "a-3", "a-4", "a-6"]
    assert beyond(bundles, between=10, limit=10**6) == []
    assert beyond(kept("a", "a"), between=0, limit=0) == []  # first and latest: never


def test_bundles_are_bounded_by_size_too_the_newest_stretch_kept():
    bundles = kept("a", "a", "a", "a", "a", size=100)
    # 200 for a's first and latest; 150 more leaves room for one of the three between
    assert names(beyond(bundles, between=10, limit=350)) == ["a-1", "a-2"]
    mixed = [*kept("a", "a"), Kept("a", shelf.Path("big"), 1000), *kept("a", "a", size=10)]
    # once one does not fit, none older is kept, even one that would fit
    assert names(beyond(mixed, between=10, limit=200)) == ["a-1", "big"]


def test_a_run_with_many_breaks_keeps_its_bound_on_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(shelf, "KEEP_BETWEEN", 3)
    j = supervised(tmp_path)
    j.pm(ev.WorldBroken("world1", 0, "a call timed out"))
    j.host.t += 5
    j.pm.step()
    for generation in range(10):
        j.pm(ev.WorldBroken("world2", generation, "worker-1 exited with code 1"))
        j.host.t += 5
        j.pm.step()
    folders = sorted(p.name for p in (tmp_path / "postmortem").iterdir())
    assert folders == ["world1-g0", "world2-g0", "world2-g6", "world2-g7", "world2-g8",
                       "world2-g9"]
    assert j.pm.latest["world2"]["path"] == str(tmp_path / "postmortem" / "world2-g9")
    # every bundle written is in the history, even those removed since
    assert len([r for r in j.records if r["event"] == "postmortem"]) == 11
    # a head that takes the run over finds them, in the order they were declared
    again = Shelf(tmp_path / "postmortem", between=0)
    assert [k.folder.name for k in again.kept] == folders
    assert [p.name for p in again.add("world1", tmp_path / "postmortem" / "world1-g0")] == \
        ["world2-g6", "world2-g7", "world2-g8"]


# -- the plan's revisions ------------------------------------------------------------------


def revision(number: int, started=(), retired=(), worlds=None) -> dict:
    return {"revision": number, "op": f"op-{number}", "replicas": {"w": [number]},
            "started": {n: {"host": "h", "start": "warm"} for n in started},
            "retired": list(retired), "worlds": worlds or {}}


def test_a_summary_is_the_revisions_laid_over_each_other_less_what_left():
    """What left is dropped, but a launched process retired and a world removed stay
    said (laid over the launch plan, the summary must take them out of it)."""
    total = None
    for record in (revision(1, ["w-1"], worlds={"p-1": {"action": "form"}}),
                   revision(2, ["w-2"], worlds={"p-2": {"action": "form"}}),
                   revision(3, [], ["w-1", "w-0"], worlds={"p-1": {"action": "remove"}})):
        total = summed(total, record, launched={"w-0"})
    assert total == {"revision": 3, "op": "op-3", "summary": True, "replicas": {"w": [3]},
                     "started": {"w-2": {"host": "h", "start": "warm"}}, "retired": ["w-0"],
                     "worlds": {"p-1": {"action": "remove"}, "p-2": {"action": "form"}},
                     "plans": None}  # (these records keep no whole plans)


def test_a_summary_keeps_the_whole_plans_of_what_is_left():
    def plans(processes=(), worlds=()):
        return {"processes": {n: {"name": n} for n in processes},
                "worlds": {w: {"name": w} for w in worlds}}
    records = [{**revision(1, ["w-1"], worlds={"p-1": {"action": "form"}}),
                "plans": plans(["w-1", "lead"], ["p-1"])},
               {**revision(2, ["w-2"], worlds={"p-2": {"action": "form"}}),
                "plans": plans(["w-2", "lead"], ["p-2"])},
               {**revision(3, [], ["w-1"], worlds={"p-1": {"action": "remove"}}),
                "plans": plans(["lead"])}]
    total = None
    for record in records:
        total = summed(total, record)
    assert total["plans"] == plans(["lead", "w-2"], ["p-2"])
    assert summed(total, revision(4))["plans"] is None  # a record of an older mwrun


def test_revisions_rotate_past_their_cap_and_read_back_as_the_plan_now(tmp_path, monkeypatch):
    monkeypatch.setenv("MWRUN_HOME", str(tmp_path))
    folder = runs.run_path("r")
    folder.mkdir(parents=True)
    plan = {"processes": {"w-0": {"start": "warm"}}}
    log = RevisionLog(folder, limit=2000)
    every = [revision(n, [f"w-{n}"], [f"w-{n - 3}"] if n > 3 else []) for n in range(1, 200)]
    for record in every:
        log.keep(record)
        sizes = [(folder / n).stat().st_size for n in ("revisions.jsonl", "revisions.1.jsonl")
                 if (folder / n).exists()]
        assert sum(sizes) <= 2 * 2000 + 1000  # both files, the summary at the newest's head
    newest = [json.loads(line) for line in (folder / "revisions.jsonl").read_text().splitlines()]
    assert newest[0]["summary"] and newest[-1] == every[-1]
    # as the status reads it: the plan as it is (the last three replicas started, w-0
    # as launched), from the newest file alone or from both
    assert sorted(log.summary["started"]) == ["w-197", "w-198", "w-199"]
    unbounded = runs.plan_now(plan, every)["processes"]
    for kept_ in (newest, runs.read_revisions("r")):  # the newest file alone, or both
        now = runs.plan_now(plan, kept_)["processes"]
        assert {"w-0", "w-197", "w-198", "w-199"} <= set(now) and "w-1" not in now
        assert all(now[name] == unbounded[name] for name in now)
    # a head that takes over carries on from the same summary
    assert RevisionLog(folder, limit=2000).summary == log.summary


def test_a_run_that_never_rotated_reads_every_revision(tmp_path, monkeypatch):
    monkeypatch.setenv("MWRUN_HOME", str(tmp_path))
    folder = runs.run_path("r")
    folder.mkdir(parents=True)
    log = RevisionLog(folder)
    for n in (1, 2):
        log.keep(revision(n, [f"w-{n}"]))
    assert [r["revision"] for r in runs.read_revisions("r")] == [1, 2]
    assert not (folder / "revisions.1.jsonl").exists()


# -- which runs clean removes ------------------------------------------------------------------


def entry(run_id: str, started: float, state: str | None = "finished",
          held: str | None = None, ended: float | None = None) -> Entry:
    return Entry(run_id, state, started, started + 10 if ended is None else ended, held)


def gone(choice) -> list[str]:
    return [e.run_id for e, _ in choice.remove]


def test_clean_keeps_the_newest_finished_runs_and_never_a_held_one():
    runs_ = [entry("live", 500, "running", "live", None), entry("new", 400),
             entry("lost", 300, "lost", "2 of its processes still run unsupervised"),
             entry("old", 200), entry("older", 100), entry("bad", 50, None, "unreadable")]
    choice = cleanable(runs_, now=1000, keep=1)
    assert gone(choice) == ["old", "older"]
    assert [e.run_id for e in choice.kept_held] == ["lost"]
    assert [e.run_id for e in choice.unreadable] == ["bad"]
    assert gone(cleanable(runs_, now=1000, keep=0)) == ["new", "old", "older"]
    # nothing said: the default retention, the newest DEFAULT_KEEP
    many = [entry(f"r{i}", i) for i in range(DEFAULT_KEEP + 2)]
    assert gone(cleanable(many, now=1000)) == ["r1", "r0"]


def test_clean_by_age_counts_from_the_end_and_either_rule_removes():
    runs_ = [entry("a", 900, ended=990), entry("b", 100, ended=950), entry("c", 100)]
    assert gone(cleanable(runs_, now=1000, older_than=60)) == ["c"]  # b ran long, ended late
    assert gone(cleanable(runs_, now=1000, keep=2, older_than=30)) == ["b", "c"]
    why = dict((e.run_id, w) for e, w in cleanable(runs_, now=1000, keep=1, older_than=60)
               .remove)
    assert why == {"b": "beyond the newest 1", "c": "beyond the newest 1, ended 15m ago"}


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("12h", 43200), ("7d", 604800),
                                               ("2w", 1209600), ("90s", 90), ("1.5h", 5400),
                                               (" 3D ", 259200)])
def test_an_age_is_a_number_and_a_unit(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "3x", "-1d", "1d2h", "seven days"])
def test_a_bad_age_says_what_an_age_is(text):
    with pytest.raises(ValueError, match="is not an age: a number and a unit"):
        parse_age(text)
