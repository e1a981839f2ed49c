"""What a drill may cost the job it measures: its faults spend no restart budget, a
drill's SIGTERM is a fault whatever the exit code, the drill warns of what its
schedule can still use up, its schedule is drawn lazily, and a drill the run did not
outlive is still recorded. The supervisor on a fake host; pure parts directly."""

import itertools
import json
import signal
import time

from click.testing import CliRunner

from mwrun.cli import drill as d
from mwrun.cli import drillrisk
from mwrun.cli.commands import main
from mwrun.cli.drilling import Drill
from mwrun.errors import RunError
from mwrun.head.decide.policy import Exit, after_exit
from mwrun.records import drills as rd
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W
from tests.unit.test_pace import history
from tests.unit.test_supervisor import join_all, make


def drill_kill(sup, host, world, process, code=-9, sig=signal.SIGKILL):
    """One drill fault on ``process``: signalled, exited with ``code``, restarted, rejoined."""
    sup.drills.kill_world(world, None, sig)
    sup.on_exit(process, code)
    rec = sup.procs[process]
    assert rec.state is P.RESTARTING, rec.why
    host.t = rec.restart_at
    sup.on_tick()
    join_all(sup)
    assert sup.worlds[world].state is W.HEALTHY


def test_a_drills_kills_spend_no_restart_budget():
    sup, host = make()  # worker: max_restarts 2
    join_all(sup)
    rec = sup.procs["worker-0"]
    for _ in range(5):  # more drill faults than max_restarts: each restarted all the same
        drill_kill(sup, host, "world1", "worker-0")
    assert (rec.restarts, rec.spent) == (5, 0)
    said = [c[1] for c in host.calls if c[0] == "say" and c[1].startswith("restarting")]
    assert said[-1] == ("restarting worker-0 (restart 5, after a drill's fault: none of"
                        " max_restarts spent)")
    host.t += 10
    sup.on_exit("worker-0", 3)  # a failure of its own spends one, the first of two
    assert rec.state is P.RESTARTING and "restart 1 of 2" in rec.why
    host.t = rec.restart_at
    sup.on_tick()
    assert (rec.restarts, rec.spent) == (6, 1)


def test_a_drills_fault_is_restarted_even_with_the_budget_spent():
    sup, host = make()
    join_all(sup)
    rec = sup.procs["worker-1"]
    for _ in range(2):  # its own failures use up max_restarts: 2
        host.t += 10
        sup.on_exit("worker-1", 3)
        host.t = rec.restart_at
        sup.on_tick()
        join_all(sup)
    assert rec.spent == 2
    drill_kill(sup, host, "world2", "worker-1")  # the drill's costs it nothing
    assert rec.spent == 2 and rec.restarts == 3
    host.t += 10
    sup.on_exit("worker-1", 3)  # and its own next failure still finds none left
    assert rec.state is P.FAILED and "no restarts left (max_restarts: 2)" in rec.why


def test_a_graceful_exit_on_a_drills_sigterm_is_a_fault():
    sup, host = make()
    join_all(sup)
    sup.drills.kill_world("world1", None, signal.SIGTERM)
    sup.on_exit("worker-0", 0)  # it caught SIGTERM and exited 0
    rec = sup.procs["worker-0"]
    assert rec.state is P.RESTARTING  # restart: on-failure, and this was a failure
    assert rec.why.startswith("worker-0 exited normally on a drill's signal; restart after")
    assert sup.worlds["world1"].state is W.BROKEN  # it breaks, and re-forms
    assert host.of("broken") == [("world1", 0, "worker-0 exited normally on a drill's signal")]
    host.t = rec.restart_at
    sup.on_tick()
    join_all(sup)
    assert sup.worlds["world1"].state is W.HEALTHY and sup.worlds["world1"].generation == 1
    host.t += 10
    sup.on_exit("worker-0", 0)  # undrilled, exiting 0 is finishing, as ever
    assert rec.state is P.EXITED


def test_the_policy_of_a_drilled_exit():
    assert not Exit(0, drilled=True).clean and Exit(0).clean
    graceful = after_exit("on-failure", 0, 1.0, 0, Exit(0, drilled=True))
    assert graceful.restart and "none of max_restarts: 0 spent" in graceful.why
    assert not after_exit("never", 3, 1.0, 0, Exit(-9, drilled=True)).restart  # its policy
    assert not after_exit("on-failure", 3, 1.0, 3, Exit(1)).restart  # spent: as before


def doc(leader_traffic=True, worker_restart="on-failure", leader_left=3):
    traffic = {"world1": {"calls_per_s": 1.0}} if leader_traffic else {}
    return {"run_id": "r", "worlds": [{"name": "world1", "members": ["leader", "worker-0"]},
                                      {"name": "world2", "members": ["leader", "worker-1"]}],
            "processes": [
                {"name": "leader", "restart": "on-failure", "restarts_left": leader_left,
                 "traffic": traffic},
                *({"name": f"worker-{i}", "restart": worker_restart, "restarts_left": 0,
                   "traffic": {}} for i in range(2))]}


HIT = {"world1": [("worker-0", 1)], "world2": [("worker-1", 1)]}


def test_the_drill_warns_of_what_its_schedule_can_use_up():
    # README's star: the drill's own faults spend nothing, and the leader (mwrun's
    # library) is told of each break: nothing to warn of, whatever the workers have left.
    assert drillrisk.risks(doc(), HIT, 12.0) == []
    # A plain leader dies at each break: 12 faults on its worlds, 3 restarts left.
    [plain] = drillrisk.risks(doc(leader_traffic=False), HIT, 12.0)
    assert plain.startswith("leader does not use mwrun's library") and "about 12 time(s)" in plain
    assert "has 3 restart(s) left" in plain
    assert drillrisk.risks(doc(leader_traffic=False, leader_left=30), HIT, 12.0) == []
    [never] = drillrisk.risks(doc(worker_restart="never"), HIT, 12.0)
    assert never.startswith("worker-0, worker-1 have restart: never: the drill's first fault")
    older = doc(leader_traffic=False)
    del older["processes"][0]["restarts_left"]
    assert drillrisk.risks(older, HIT, 12.0) == []  # an older head says nothing of it


def test_the_schedule_is_drawn_lazily():
    started = time.monotonic()
    shots = d.schedule(1, 0.001, 1_000_000.0, HIT)  # about a billion faults
    first = list(itertools.islice(shots, 1000))
    assert len(first) == 1000 and first[-1].at < 10.0
    assert time.monotonic() - started < 30  # drawn as reached, never all at once
    assert d.expected(0.001, 1_000_000.0) == (1e9, 0.0)


def test_worlds_naming_none_is_refused(tmp_path):
    for worlds in ("", " , "):
        result = CliRunner().invoke(main, ["drill", "--every", "1", "--for", "5",
                                           "--worlds", worlds],
                                    env={"MWRUN_HOME": str(tmp_path)})
        assert result.exit_code == 2, result.output
        assert result.output.count("\n") == 1 and "--worlds names no world" in result.output


def test_a_drill_that_outlives_its_run_records_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("MWRUN_HOME", str(tmp_path / "home"))  # no such run: not live
    (tmp_path / "history.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in history(end=9.0)))
    now = [9.0]

    def clock():
        now[0] += 0.1
        return now[0]

    def ask(control, message):
        if message["verb"] == "status" and now[0] < 12.0:
            return {"ok": True, "status": {"worlds": [], "processes": []}}
        raise RunError("the supervisor has gone")  # from 12 s on: the run ended

    said = []
    _, code = Drill("r", "sock", [rd.Shot(50.0, "world1", "worker-0", 1)],
                         {"every": 5.0, "for": 100.0, "signal": "KILL", "seed": 1,
                          "targets": None},
                         say=said.append, tty=False, clock=clock, sleep=lambda _: None,
                         ask=ask, run_dir=tmp_path).run()
    assert code == 1
    last = json.loads((tmp_path / "history.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "drill" and last["run_ended"] == "run r ended during the drill"
    assert last["for"] == 100.0 and last["t"] > 12.0 and last["worlds"]
    assert "run r ended during the drill" in "".join(said)
    assert "summary was not recorded" not in "".join(said)
