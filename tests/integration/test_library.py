"""The worlds library on real processes, gloo over 127.0.0.1, started by hand."""

import signal
import sys
import time
from datetime import timedelta

import psutil
import pytest

from mwrun import protocol
from tests.helpers import free_port, python
from tests.integration.jobs import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("size", [2, 3, 4])
def test_every_call_gives_the_right_values(procs, size, tmp_path):
    port, gate = free_port(), tmp_path / "gate"
    ranks = [procs.start(python("calls.py", "--rank", r, "--size", size, "--port", port,
                                "--gate", gate)) for r in range(size)]
    for proc in ranks:  # every rank is done with its calls before any leaves the world
        proc.expect(lambda v: isinstance(v, dict) and v.get("call") == "async_all_reduce",
                    timeout=90)
    gate.write_text("")
    for rank, proc in enumerate(ranks):
        assert proc.wait() == 0, proc.output()
        calls = {rec["call"]: rec for rec in proc.records()}
        expected = {"send_recv", "isend_irecv", "broadcast", "all_reduce_sum", "all_reduce_max",
                    "all_gather", "scatter", "barrier", "async_all_reduce"}
        expected |= {"reduce"} if rank == 0 else set()
        expected |= {"gather"} if rank == size - 1 else set()
        assert set(calls) == expected
        for rec in calls.values():
            assert rec["value"] == rec["expected"], rec


def test_one_process_in_three_worlds_with_a_rank_in_each(procs):
    pa, pb, pc = free_port(), free_port(), free_port()
    # hub is rank 0 of A, rank 1 of B, rank 2 of C
    hub = procs.start(python("multi.py", "--name", "hub", "--world", f"A:0:2:{pa}",
                             "--world", f"B:1:2:{pb}", "--world", f"C:2:3:{pc}"))
    x = procs.start(python("multi.py", "--name", "x", "--world", f"A:1:2:{pa}",
                           "--world", f"C:0:3:{pc}"))
    y = procs.start(python("multi.py", "--name", "y", "--world", f"B:0:2:{pb}",
                           "--world", f"C:1:3:{pc}"))
    for proc in (hub, x, y):
        assert proc.wait() == 0, proc.output()
    seen = {(r["process"], r["world"]): r for p in (hub, x, y) for r in p.records()}
    assert seen[("hub", "A")]["rank"] == 0 and seen[("hub", "A")]["sum"] == 3.0
    assert seen[("hub", "B")]["rank"] == 1 and seen[("hub", "B")]["sum"] == 3.0
    assert seen[("hub", "C")]["rank"] == 2 and seen[("hub", "C")]["sum"] == 6.0
    assert seen[("x", "C")]["ranks"] == [0.0, 1.0, 2.0]
    assert len(seen) == 7


def start_star(procs, timeout=20, rejoin=False, interval1=0.0):
    p1, p2 = free_port(), free_port()
    args = ["--p1", p1, "--p2", p2, "--timeout", timeout] + (["--rejoin"] if rejoin else [])
    leader = procs.start(python("leader.py", *args))
    s1 = procs.start(python("sender.py", "--world", "w1", "--port", p1, "--timeout", timeout,
                            "--interval", interval1))
    # w2 paced too: sent flat out, it and the leader's w2 thread would take a core each
    # for as long as the test runs, and the busier the machine the longer that is.
    s2 = procs.start(python("sender.py", "--world", "w2", "--port", p2, "--timeout", timeout,
                            "--interval", 0.01))
    leader.expect_key("ready")
    return leader, s1, s2, p1


def test_killed_peer_breaks_only_its_world(procs):
    leader, s1, _, _ = start_star(procs, interval1=0.01)
    s1.popen.send_signal(signal.SIGKILL)
    broken = leader.expect_key("broken_at")
    assert broken["world"] == "w1"
    # Told by the lost peer, not by the world's 20 s timeout (how soon after the kill:
    # bench/supervisor.py).
    assert "timed out" not in broken["reason"], broken
    leader.expect_key("again_raises")
    # w2 is untouched: its calls go on completing after w1 broke.
    assert leader.expect_key("w2_after_break")["w2_after_break"] >= 5
    leader.expect_key("done")
    assert leader.wait() == 0


def test_stopped_peer_breaks_within_the_world_timeout(procs):
    leader, s1, _, _ = start_star(procs, timeout=2, interval1=0.01)
    s1.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    broken = leader.expect_key("broken_at", timeout=60)
    # By the 2 s timeout: never before it (a busy machine can only make it later).
    assert broken["broken_at"] - stopped_at >= 1.0, broken
    assert "timed out" in broken["reason"]
    s1.signal(signal.SIGCONT)


@pytest.mark.slow
def test_break_restart_rejoin_and_communicate_again(procs):
    leader, s1, _, p1 = start_star(procs, rejoin=True, interval1=0.01)
    s1.popen.send_signal(signal.SIGKILL)
    leader.expect_key("broken_at")
    restarted = procs.start(python("sender.py", "--world", "w1", "--port", p1, "--count", "5"))
    assert restarted.expect_key("formed")["formed"] == 1
    assert leader.expect_key("rejoined")["rejoined"] == 1
    assert leader.expect_key("after_rejoin")["after_rejoin"] == [0.0] * 4
    leader.expect_key("done")
    assert leader.wait() == 0


def test_store_marked_break_wakes_calls_blocked_on_live_peers(procs):
    import torch.distributed as dist

    port = free_port()
    ranks = [procs.start(python("trio.py", "--rank", r, "--port", port)) for r in range(3)]
    blocked = [psutil.Process(proc.expect_key("ready")["pid"]) for proc in ranks]
    # Blocked calls do not spin: rank 0 waits in a recv, ranks 1 and 2 in a barrier
    # (nothing would ever complete them). Each is seen using under a quarter of a core
    # for a whole second: a spinning wait takes a whole core for as long as it waits.
    for proc in blocked:
        wait_for(lambda p=proc: cpu_share(p, 1.0) < 0.25, timeout=60,
                 what=f"{proc.pid} to wait without spinning")
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=10))
    protocol.mark_broken(store, 0, 3, "drill")
    for proc in ranks:
        broken = proc.expect_key("broken_at")
        assert broken["reason"] == "drill"  # the mark woke it, not the world's 60 s timeout
        assert proc.wait() == 0


def cpu_share(proc: psutil.Process, seconds: float) -> float:
    """The share of one core ``proc`` used over the next ``seconds``."""
    before = sum(proc.cpu_times()[:2])
    time.sleep(seconds)  # the window measured
    return (sum(proc.cpu_times()[:2]) - before) / seconds


@pytest.mark.slow
@pytest.mark.timeout(300)  # 50 breaks and rejoins: 30 s alone, 80 s on a busy machine
def test_fifty_break_rejoin_cycles_do_not_leak(procs):
    import torch.distributed as dist

    cycles = 50
    port = free_port()
    # The calls' timeout, which also bounds how long a rejoining member waits for its
    # peer's address, is long enough for a busy machine (cycler.py's own is 5 s).
    members = [procs.start(python("cycler.py", "--rank", r, "--port", port,
                                  "--cycles", cycles, "--timeout", 20)) for r in (0, 1)]
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=10))
    for generation in range(cycles + 1):
        for member in members:
            member.expect(lambda v, g=generation: isinstance(v, dict) and v.get("ready") == g)
        if generation < cycles:
            protocol.mark_broken(store, generation, 2, f"drill {generation}")
    for rank, member in enumerate(members):
        assert member.wait() == 0, member.output()
        [settled] = [r for r in member.records() if r.get("baseline")]
        [last] = [r for r in member.records() if r.get("final")]
        assert last["threads"] == settled["threads"], (rank, settled, last)
        assert last["os_threads"] <= settled["os_threads"] + 2, (rank, settled, last)
        assert last["fds"] <= settled["fds"] + 4, (rank, settled, last)
        assert last["rss"] - settled["rss"] < 60 * 2**20, (rank, settled, last)
        assert len([r for r in member.records() if "ready" in r]) == cycles + 1


def test_asyncio_leader_receives_from_two_worlds_at_once(procs):
    p1, p2 = free_port(), free_port()
    leader = procs.start(python("async_leader.py", "--p1", p1, "--p2", p2, "--count", 20))
    senders = [procs.start(python("sender.py", "--world", w, "--port", p, "--count", 20,
                                  "--then-all-reduce")) for w, p in (("w1", p1), ("w2", p2))]
    assert leader.wait() == 0, leader.output()
    [result] = leader.records()
    assert result["w1"] == [float(i) for i in range(20)]
    assert result["w2"] == [float(i) for i in range(20)]
    assert result["sums"] == [3.0, 3.0]
    for sender in senders:
        assert sender.wait() == 0
        assert sender.expect_key("all_reduce")["all_reduce"] == 3.0


def test_a_default_group_of_the_script_coexists(procs):
    default_port, port = free_port(), free_port()
    ranks = [procs.start(python("coexist.py", "--rank", r, "--default-port", default_port,
                                "--port", port)) for r in (0, 1)]
    for proc in ranks:
        assert proc.wait() == 0, proc.output()
        assert proc.records() == [{"default": 3.0, "mwrun": 30.0, "default_again": 2.0}]


def test_a_member_that_leaves_is_named_and_rejoin_says_every_peer_left(procs):
    port = free_port()
    stays = procs.start(python("leaver.py", "--rank", 0, "--port", port))
    procs.start(python("leaver.py", "--rank", 1, "--port", port))
    report = stays.expect_key("rejoin_seconds")
    assert report["reason"] == "rank 1 left the world (it closed it)"
    # by hand, a world whose every peer left is over: rejoin() says so, rather than
    # waiting out its 1 s timeout or the world's 30 s one
    assert report["final"] == "every peer left the world (they closed it)"


REJOIN_DEFAULT = """
import json, sys, time
import mwrun
alone, pair = (int(p) for p in sys.argv[1:3])
job = mwrun.init(worlds={
    "alone": mwrun.WorldSpec(rank=0, size=1, port=alone),
    "pair": mwrun.WorldSpec(rank=0, size=2, port=pair, rejoin=1.0)}, timeout=1.0)
started = time.monotonic()
try:
    job.world("pair").rejoin()  # no timeout given: the spec's (the launcher's) default
except mwrun.BrokenWorldError as exc:
    print(json.dumps({"seconds": time.monotonic() - started, "reason": exc.reason}))
job.close()
"""


def test_rejoin_waits_by_default_as_long_as_its_spec_says(procs):
    # Under the launcher the deadline comes in MWRUN_WORLDS (plan/timeouts.py); here a
    # world whose peer never comes gives up after it, not never.
    proc = procs.start([sys.executable, "-c", REJOIN_DEFAULT, str(free_port()),
                        str(free_port())])
    report = proc.expect_key("seconds", timeout=60)
    assert report["seconds"] >= 1.0
    assert report["reason"] == "rank 1 did not join in time"
    assert proc.wait() == 0, proc.output()
