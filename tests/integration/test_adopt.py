"""A new head takes back a run whose head died (``mwrun adopt``; DESIGN, "A head that
can die"): every process with the pid it had, every world as it was; what exited while
the head was away restarted and its worlds formed again; one head at a time, a stale one
changing nothing. Real processes, real stores, a real SIGKILL and SIGSTOP."""

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W
from tests.helpers import BIN, leftovers, wait_gone
from tests.integration import testbed
from tests.integration.jobs import (
    cli,
    count,
    healthy,
    launch,
    status,
    ticker_job,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.timeout(240)


def pids_of(doc) -> dict:
    return {p["name"]: p["pid"] for p in doc["processes"]}


def headless(procs, home, tmp_path):
    """A ticker job running, then its head SIGKILLed: (its pids, the count file)."""
    path, out = ticker_job(tmp_path)
    job = launch(procs, home, path)
    doc = healthy(home)
    wait_for(lambda: count(out) > 0, 60, "the first count")
    saved = home / "runs" / doc["run_id"] / "state.json"  # (written behind: both pids)
    wait_for(lambda: pids_of(json.loads(saved.read_text())) == pids_of(doc), 30, "state.json")
    head_killed(job, home)
    return pids_of(doc), out, doc["run_id"]


def head_killed(head, home) -> None:
    """SIGKILL to the run's head (its process here), until its agents say it is away."""
    head.signal(signal.SIGKILL)
    head.wait(30)
    wait_for(lambda: (status(home).get("head") or {}).get("state") == "away", 30, "away")


def adopt(procs, home, *extra):
    return procs.start([sys.executable, "-m", "mwrun", "adopt", *extra],
                       env={"MWRUN_HOME": str(home), "NO_COLOR": "1"})


def test_a_new_head_takes_the_run_back_with_every_pid_and_its_world(procs, home, tmp_path):
    pids, out, run = headless(procs, home, tmp_path)
    head = adopt(procs, home)
    doc = healthy(home, epoch=2)
    assert pids_of(doc) == pids  # nothing was restarted
    assert doc["supervisor_pid"] == head.pid and doc["state"] == R.RUNNING
    assert not (home / "runs" / run / "head-away.json").exists()
    assert doc["worlds"][0]["breaks"] == 0
    seen = count(out)
    wait_for(lambda: count(out) > seen + 10, 30, "counts under the new head")
    head.expect(lambda line: "adopted (head epoch 2): 2 of 2 processes found running" in line)

    # The new head supervises as the first did: a drill's kill is restarted, the world
    # formed again; then a stop ends it all.
    hit = cli(home, "kill-world", "w", "--rank", "1")
    assert hit.returncode == 0, hit.stderr
    wait_status(home, lambda d: d["worlds"][0]["breaks"] == 1
                and d["worlds"][0]["state"] == W.HEALTHY
                and all(p["state"] == P.RUNNING for p in d["processes"]),
                "the world formed again", timeout=120)
    stopped = cli(home, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert head.wait(60) == 0
    assert status(home)["state"] == R.FINISHED
    wait_gone(home)


def test_a_member_that_died_while_the_head_was_away_is_restarted_by_the_new_head(
        procs, home, tmp_path):
    pids, out, _ = headless(procs, home, tmp_path)
    psutil.Process(pids["b"]).kill()
    wait_for(lambda: not psutil.pid_exists(pids["b"]), 30, "b gone")
    adopt(procs, home)
    doc = wait_status(home, lambda d: d.get("epoch") == 2 and d["worlds"][0]["state"]
                      == W.HEALTHY and all(p["state"] == P.RUNNING for p in d["processes"])
                      and d["worlds"][0]["generation"] > 0, "b back", timeout=120)
    now = pids_of(doc)
    assert now["a"] == pids["a"] and now["b"] != pids["b"]
    b = next(p for p in doc["processes"] if p["name"] == "b")
    assert b["restarts"] == 1
    assert doc["worlds"][0]["breaks"] == 1  # its one death, broken once
    seen = count(out)
    wait_for(lambda: count(out) > seen + 10, 30, "counts again")
    assert cli(home, "stop").returncode == 0
    wait_gone(home)


def test_of_two_adopts_at_once_one_takes_the_run_and_the_other_says_so(
        procs, home, tmp_path):
    pids, _, _ = headless(procs, home, tmp_path)
    first, second = adopt(procs, home), adopt(procs, home)
    doc = healthy(home, epoch=2)
    assert pids_of(doc) == pids
    winner, loser = (first, second) if doc["supervisor_pid"] == first.pid else (second, first)
    assert doc["supervisor_pid"] == winner.pid
    assert loser.wait(60) == 1
    said = loser.output()
    assert "Error:" in said and "Traceback" not in said, said
    assert ("took epoch 2 of this run first" in said or "has a head" in said), said
    assert winner.popen.poll() is None
    assert cli(home, "stop").returncode == 0
    assert winner.wait(60) == 0
    wait_gone(home)


def test_a_stale_head_changes_nothing_and_exits_saying_why(procs, home, tmp_path):
    """The head of epoch 2 is stopped (SIGSTOP) and a third takes the run from it
    (--force); continued, the stale head writes nothing, tells nothing, and exits."""
    pids, out, run = headless(procs, home, tmp_path)
    stale = adopt(procs, home)
    healthy(home, epoch=2)
    refused = cli(home, "adopt")
    assert refused.returncode == 1 and "has a head (pid" in refused.stderr, refused.stderr
    stale.signal(signal.SIGSTOP)
    try:
        new = adopt(procs, home, "--force")
        doc = healthy(home, epoch=3)
        assert doc["supervisor_pid"] == new.pid and pids_of(doc) == pids
    finally:
        stale.signal(signal.SIGCONT)
    assert stale.wait(60) == 3
    assert "a newer head (epoch 3" in stale.output() and "changes nothing" in stale.output()
    saved = json.loads((home / "runs" / run / "state.json").read_text())
    assert saved["supervisor_pid"] == new.pid and saved["epoch"] == 3  # not overwritten
    assert pids_of(status(home)) == pids and status(home)["state"] == R.RUNNING
    seen = count(out)
    wait_for(lambda: count(out) > seen + 10, 30, "counts under the third head")
    assert cli(home, "stop").returncode == 0
    assert new.wait(60) == 0
    wait_gone(home)
    assert not leftovers(home)


def test_adopt_refuses_a_run_it_cannot_take_and_says_why(procs, home, tmp_path):
    path, _ = ticker_job(tmp_path, grace=0)
    job = launch(procs, home, path)
    healthy(home)
    live = cli(home, "adopt")
    assert live.returncode == 1 and "has a head (pid" in live.stderr, live.stderr
    job.signal(signal.SIGKILL)
    job.wait(30)
    wait_gone(home)
    lost = cli(home, "adopt", next((home / "runs").iterdir()).name)
    assert lost.returncode == 1 and "nothing kept it going" in lost.stderr, lost.stderr
    for said in (live.stderr, lost.stderr):
        assert "Traceback" not in said


def test_with_head_restart_the_heads_machine_starts_a_new_head_itself(procs, home, tmp_path):
    """head_restart: the agent of the head's machine adopts the run with a head of its
    own (console in supervisor.log); that head killed too, the next one takes over."""
    path, out = ticker_job(tmp_path, restart=True)
    job = launch(procs, home, path)
    doc = healthy(home)
    pids, run = pids_of(doc), doc["run_id"]
    job.signal(signal.SIGKILL)
    job.wait(30)
    second = healthy(home, epoch=2)
    assert pids_of(second) == pids and second["supervisor_pid"] != job.pid
    log = (home / "runs" / run / "supervisor.log").read_text()
    assert "adopted (head epoch 2): 2 of 2 processes found running" in log, log
    psutil.Process(second["supervisor_pid"]).kill()
    third = healthy(home, epoch=3)
    assert pids_of(third) == pids
    seen = count(out)
    wait_for(lambda: count(out) > seen + 10, 30, "counts under the third head")
    stopped = cli(home, "stop")
    assert stopped.returncode == 0, stopped.stderr
    wait_gone(home)
    assert status(home)["state"] == R.FINISHED


def test_restart_head_hands_a_live_run_to_a_new_head_with_nothing_touched(
        procs, home, tmp_path):
    """No head_grace needed: the head that runs hands over, says so, and ends well;
    the counts never stop."""
    path, out = ticker_job(tmp_path, grace=0)
    job = launch(procs, home, path)
    doc = healthy(home)
    pids, run = pids_of(doc), doc["run_id"]
    wait_for(lambda: count(out) > 0, 60, "the first count")
    handed = cli(home, "restart-head")
    assert handed.returncode == 0, handed.stderr
    assert "is run by its new head" in handed.stdout and "epoch 2" in handed.stdout
    assert job.wait(60) == 0
    job.expect(lambda line: "handed over to a new head" in line)
    new = healthy(home, epoch=2)
    assert pids_of(new) == pids and new["worlds"][0]["breaks"] == 0
    assert new["supervisor_pid"] != job.pid and psutil.pid_exists(new["supervisor_pid"])
    seen = count(out)
    wait_for(lambda: count(out) > seen + 10, 30, "counts under the new head")
    log = (home / "runs" / run / "supervisor.log").read_text()
    assert "adopted (head epoch 2)" in log, log
    assert cli(home, "stop").returncode == 0
    wait_gone(home)
    assert status(home)["state"] == R.FINISHED


def ssh_ticks(tmp_path, n1, grace: float):
    """A ticker job with member b on ssh host ``n1``: (its topology, the count file)."""
    out = tmp_path / "count"
    cmd = f"[{sys.executable}, {BIN / 'pair.py'}, --interval, 0.05, --out, {out}]"
    path = tmp_path / "ticks.yaml"
    path.write_text(
        f"version: 1\nname: ticks\nhead_grace: {grace}\nhead_restart: false\nhosts:\n"
        f"  head: {{addr: {n1.head_addr}}}\n"
        f"  node1: {{addr: {n1.addr}, ssh: '{n1.ssh}',"
        f" ssh_options: {json.dumps(n1.ssh_options())}}}\n"
        f"processes:\n  a: {{cmd: {cmd}, host: head, restart: on-failure}}\n"
        f"  b: {{cmd: {cmd}, host: node1, restart: on-failure}}\n"
        f"worlds:\n  w: {{members: [a, b]}}\n")
    return path, out


@pytest.mark.skipif(testbed.missing() is not None, reason=testbed.missing() or "")
def test_restart_head_with_an_ssh_host_and_no_grace_hands_every_link_over(
        procs, home, tmp_path):
    """Without a head_grace an agent ends everything once its head's link closes: the
    old head keeps its links (and the keeper's) open until the new head, reaching the
    ssh host's agent over ssh, has them all; only then does it end."""
    with testbed.node(tmp_path) as n1:
        path, out = ssh_ticks(tmp_path, n1, 0)
        job = launch(procs, home, path)
        pids = pids_of(healthy(home))
        wait_for(lambda: count(out) > 0, 120, "the first count")
        handed = cli(home, "restart-head")
        assert handed.returncode == 0, handed.stderr
        assert job.wait(60) == 0
        new = healthy(home, epoch=2)
        assert pids_of(new) == pids and new["worlds"][0]["breaks"] == 0
        seen = count(out)
        wait_for(lambda: count(out) > seen + 10, 30, "counts across hosts, handed over")
        assert cli(home, "stop").returncode == 0
        wait_gone(home)
        wait_for(lambda: not n1.leftovers(), 30, "a clean node")


@pytest.mark.skipif(testbed.missing() is not None, reason=testbed.missing() or "")
def test_a_new_head_finds_an_ssh_hosts_agent_again(procs, home, tmp_path):
    """Over ssh the agent outlives the head's session; ``mwrun adopt`` reaches it
    through ``mwrun agent-door`` there (the run's secret was told it over its first
    link): the node's member keeps its pid, the world across hosts its counts."""
    with testbed.node(tmp_path) as n1:
        path, out = ssh_ticks(tmp_path, n1, 600)
        job = launch(procs, home, path)
        doc = healthy(home)
        pids = pids_of(doc)
        wait_for(lambda: count(out) > 0, 120, "the first count")
        head_killed(job, home)
        head = adopt(procs, home)
        adopted = healthy(home, epoch=2)
        assert pids_of(adopted) == pids
        assert {h["name"]: h["state"] for h in adopted["hosts"]} == {"head": "local",
                                                                     "node1": "up"}
        seen = count(out)
        wait_for(lambda: count(out) > seen + 10, 30, "counts across hosts, adopted")
        assert cli(home, "stop").returncode == 0
        assert head.wait(60) == 0
        wait_gone(home)
        wait_for(lambda: not n1.leftovers(), 30, "a clean node")


def test_after_adoption_a_lost_agent_is_started_afresh_and_a_third_head_finds_it(
        procs, home, tmp_path):
    """The adopted head's machine's agent SIGKILLed: reached again as at launch (a
    fresh agent, the processes restarted there), and the run folder says where it is,
    so the head after this one adopts the run from it."""
    _, _, run = headless(procs, home, tmp_path)
    head = adopt(procs, home)
    doc = healthy(home, epoch=2)
    (agent,) = [h["agent_pid"] for h in doc["hosts"]]
    psutil.Process(agent).kill()
    head.expect(lambda line: "host localhost is reachable again" in line, 60)
    after = wait_status(home, lambda d: all(p["state"] == P.RUNNING and p["restarts"] >= 1
                                            for p in d["processes"])
                        and all(w["state"] == W.HEALTHY for w in d["worlds"]),
                        "restarted under a fresh agent", timeout=120)
    (fresh,) = [h["agent_pid"] for h in after["hosts"]]
    assert fresh not in (None, agent)
    agents = json.loads((home / "runs" / run / "agents.json").read_text())
    assert agents["localhost"]["pid"] == fresh

    head_killed(head, home)
    third = adopt(procs, home)
    doc = healthy(home, epoch=3)
    assert pids_of(doc) == pids_of(after) and doc["supervisor_pid"] == third.pid
    assert cli(home, "stop").returncode == 0
    assert third.wait(60) == 0
    wait_gone(home)


def test_a_head_killed_while_its_machines_agent_is_stalled_is_adopted_once_it_answers(
        procs, home, tmp_path):
    """The head SIGKILLed while its machine's agent is stopped (SIGSTOP): adopt cannot
    be told what runs there, so it refuses, saying so, and touches nothing; once the
    agent runs again, the next adopt takes the run with every pid."""
    pids, _, _ = headless(procs, home, tmp_path)
    (agent,) = [h["agent_pid"] for h in status(home)["hosts"]]
    stalled = psutil.Process(agent)
    stalled.suspend()
    try:
        refused = cli(home, "adopt")
    finally:
        stalled.resume()
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "agent did not answer at its door" in refused.stderr and "nothing was touched" \
        in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert (status(home).get("head") or {}).get("state") == "away"
    assert all(psutil.pid_exists(pid) for pid in pids.values())
    head = adopt(procs, home)
    doc = wait_status(home, lambda d: d.get("epoch", 0) > 2 and "head" not in d
                      and all(w["state"] == W.HEALTHY for w in d["worlds"])
                      and all(p["state"] == P.RUNNING for p in d["processes"]),
                      "adopted once the agent answers", timeout=120)
    assert pids_of(doc) == pids and doc["supervisor_pid"] == head.pid
    assert cli(home, "stop").returncode == 0
    assert head.wait(60) == 0
    wait_gone(home)


def test_a_crash_looping_head_is_given_up_and_the_grace_ends_the_job_cleanly(
        procs, home, tmp_path):
    """Every new head fails at once (plan.json damaged after the launch): the agent
    starts TRIES of them, backing off, then no more; the grace runs out and every
    process is gone, the run lost saying why, nothing left anywhere."""
    from mwrun.host import headrestart

    path, _ = ticker_job(tmp_path, grace=30, restart=True)
    job = launch(procs, home, path)
    doc = healthy(home)
    run_dir = home / "runs" / doc["run_id"]
    (run_dir / "plan.json").write_text("{")
    job.signal(signal.SIGKILL)
    job.wait(30)
    gone = wait_status(home, lambda d: d["state"] == R.LOST, "the run lost", timeout=120)
    assert "no head came back within head_grace (30s)" in str(gone.get("lost")), gone
    log = (run_dir / "supervisor.log").read_text()
    assert log.count("plan.json cannot be read") == headrestart.TRIES, log
    assert "Traceback" not in log
    wait_gone(home)
    assert all(not psutil.pid_exists(pid) for pid in pids_of(doc).values())


def test_a_head_killed_while_it_captures_a_hung_member_leaves_it_to_the_new_head(
        procs, home, tmp_path):
    """A member SIGSTOPped, declared hung, its world being captured (its kill waits for
    the capture) when the head is SIGKILLed: the new head finds it still stopped,
    declares it hung again, writes the bundle that names it, kills and restarts it;
    one copy of it runs in the end, no bundle is left half written."""
    path, _ = ticker_job(tmp_path)
    path.write_text(path.read_text().replace("head_grace: 600\n",
                                             "head_grace: 600\nhang_timeout: 2\n"))
    # Stacks read from inside only: a stopped member never answers, so each capture
    # takes its whole wait (2 s), the kill held back meanwhile.
    job = procs.start([sys.executable, "-m", "mwrun", "launch", str(path)], env={
        "MWRUN_HOME": str(home), "NO_COLOR": "1", "MWRUN_STACKS_TOOL": "none"})
    doc = healthy(home)
    run, victim = doc["run_id"], pids_of(doc)["b"]
    folder = home / "runs" / run
    os.kill(victim, signal.SIGSTOP)
    try:
        wait_for(lambda: any(p["name"] == "b" and p["state"] == P.HUNG for p in json.loads(
            (folder / "state.json").read_text())["processes"]), 60, "b declared hung")
        head_killed(job, home)
        head = adopt(procs, home)
        doc = healthy(home, epoch=2)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGCONT)  # (a pid left stopped would never end)
        raise
    assert pids_of(doc)["b"] != victim and not psutil.pid_exists(victim)
    assert [p["restarts"] for p in doc["processes"] if p["name"] == "b"] == [1]
    bundles = [json.loads(line) for line in (folder / "history.jsonl").read_text()
               .splitlines() if '"postmortem"' in line]
    assert any(b.get("hung") == "b" for b in bundles), bundles
    assert all((Path(b["path"]) / "bundle.json").exists() for b in bundles)
    assert all((f / "bundle.json").exists() for f in (folder / "postmortem").iterdir())
    assert cli(home, "stop").returncode == 0
    assert head.wait(60) == 0
    wait_gone(home)
