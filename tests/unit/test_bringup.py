"""What ``launch --detach`` says of a bring-up: the head's view (progress.view) and the
command line's verdict on it (bringup.judge), on records and views made by hand."""

from mwrun.head.bringup import judge
from mwrun.head.decide.records import ProcessRecord, Worker, WorldRecord
from mwrun.head.observe.progress import view
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W

PAIRS = """\
processes:
  a: {cmd: x}
  b: {cmd: y}
  c: {cmd: z}
worlds:
  ab: {members: [a, b]}
  bc: {members: [b, c]}
"""


def records():
    plan = place(parse(PAIRS, "t.yaml"), {"localhost": HostInventory(True, (0, 1), ())},
                 lambda a, t: 40000)
    procs = {n: ProcessRecord(p, worker=Worker(pid=100 + i, started=10.0))
             for i, (n, p) in enumerate(plan.processes.items())}
    return procs, {n: WorldRecord(w) for n, w in plan.worlds.items()}


def test_the_view_tells_who_joins_through_the_library_and_for_how_long_all_ran():
    procs, worlds = records()
    procs["a"].worker.said_hello = True
    procs["c"].worker.pid = None  # its start is not answered yet
    seen = view({"ab", "bc"}, procs, worlds, now=14.0)
    assert seen == {"worlds": 2, "failed": {}, "waiting": {
        "ab": {"state": W.FORMING.value, "library": True, "opaque": False, "up_s": 4.0},
        "bc": {"state": W.FORMING.value, "library": False, "opaque": False, "up_s": None}}}


def test_the_view_names_processes_that_failed_or_restarted_before_their_worlds_formed():
    procs, worlds = records()
    procs["a"].state, procs["a"].why = P.FAILED, "a exited with code 2"
    procs["c"].restarts, procs["c"].why = 1, "c exited with code 3; restarted"
    assert view({"bc"}, procs, worlds, 14.0)["failed"] == {  # ab formed: a is no news
        "c": "c exited with code 3; restarted"}
    assert set(view({"ab", "bc"}, procs, worlds, 14.0)["failed"]) == {"a", "c"}


def seen(state=R.RUNNING, failed=None, **waiting):
    return {"state": state.value, "failed": failed or {}, "worlds": 2,
            "waiting": {name: {"state": W.FORMING.value, "library": library,
                               "opaque": opaque, "up_s": up}
                        for name, (library, opaque, up) in waiting.items()}}


def test_the_verdict():
    assert judge(seen(), 5.0) == ("every world formed", 0)
    text, code = judge(seen(failed={"a": "a exited with code 2"}, ab=(False, False, None)),
                       5.0)
    assert code == 1 and text.endswith("the run goes on (mwrun stop {run} ends it);"
                                       " mwrun logs PROCESS {run} shows why:\n"
                                       "  a exited with code 2")
    assert judge(seen(R.FAILED, {"a": "lost"}), 5.0)[0].startswith(
        "1 process failed before its worlds formed; the run has failed;")
    assert judge(seen(R.FINISHED), 5.0)[1] == 0
    assert judge(seen(R.STOPPING), 5.0)[1] == 1
    # A world a library member joins: waited for, however long.
    assert judge(seen(ab=(True, False, 60.0)), 5.0) is None
    # Plain members: waited for until every one ran QUIET seconds unheard.
    assert judge(seen(ab=(False, False, 4.0)), 5.0) is None
    assert judge(seen(ab=(False, False, None)), 5.0) is None
    text, code = judge(seen(ab=(False, False, 6.0), bc=(False, True, None)), 5.0)
    assert code == 0 and text.startswith("mwrun cannot tell whether ab, bc will form")
    # Not while a world that can be told is still forming.
    assert judge(seen(ab=(False, False, 6.0), bc=(True, False, 6.0)), 5.0) is None


def test_a_long_wait_is_said_again_every_say_every_until_the_verdict(monkeypatch):
    """``launch --detach`` repeats what it waits for, with how long so far, every
    SAY_EVERY seconds of a long wait, then says the verdict (a fake clock: on a busy
    machine the looks' timing is not the point)."""
    from mwrun.head import bringup

    t = [0.0]
    looks = iter([{"worlds": 2, "failed": {}, "waiting": {"w1": {}, "w2": {}}}] * 4)
    monkeypatch.setattr(bringup, "_bringup", lambda run_id: next(looks, {"done": True}))
    monkeypatch.setattr(bringup, "judge",
                        lambda seen, quiet: ("gone", 3) if "done" in seen else None)
    monkeypatch.setattr(bringup.time, "sleep", lambda s: t.__setitem__(0, t[0] + 6.0))
    said = []
    code = bringup._wait_formed("r", said.append, lambda: False, clock=lambda: t[0])
    assert code == 3
    assert said[0] == "waiting for 2 worlds to form: w1, w2"
    assert said[1] == "waiting for 2 worlds to form: w1, w2 (0 formed; 12s so far)"
    assert said[-1] == "gone"
