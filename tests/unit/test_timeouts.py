"""The timeout chain: call timeout < hang_timeout < peers' rejoin() deadline, per process.

Derived defaults keep the order; numbers written out of order are refused with the
position of the one that breaks it; --dry-run prints the chain with each number's source.
"""

import math

import pytest
from click.testing import CliRunner

from mwrun import protocol
from mwrun.cli.commands import main
from mwrun.plan import timeouts
from mwrun.plan.topology import parse
from tests.unit.test_topology import problems

JOB = ("processes:\n  leader: {cmd: x}\n  worker: {cmd: y, replicas: 2}\n"
       "worlds:\n  w1: {members: [leader, worker-0]}\n  w2: {members: [leader, worker-1]}\n")


def holds(chain: timeouts.Chain) -> bool:
    return chain.timeout.seconds < chain.hang.seconds < chain.rejoin.seconds and \
        chain.beat * protocol.BEATS_PER_HANG <= chain.hang.seconds


@pytest.mark.parametrize("top, extra", [
    ("", ""),  # every number a default
    ("timeout: 5\n", ""),
    ("timeout: 300\n", ""),  # a long call: the hang deadline follows it
    ("hang_timeout: 2\n", ""),  # a short hang deadline: the calls' timeout follows it
    ("hang_timeout: .inf\n", ""),  # hang detection off: nothing to wait for
    ("timeout: 1\n", "  w3: {members: [leader], timeout: 100}\n"),  # the longest counts
    ("", "  w3: {members: [worker-0]}\n"),
])
def test_derived_defaults_keep_the_order(top, extra):
    topology = parse(top + JOB + extra, "t.yaml")
    chains = timeouts.chains(topology)
    assert set(chains) == {"leader", "worker-0", "worker-1"}
    for chain in chains.values():
        if math.isinf(chain.hang.seconds):
            assert math.isinf(chain.rejoin.seconds)  # rejoin() waits as long as it takes
        else:
            assert holds(chain), chain


def test_defaults_and_their_sources():
    topology = parse("timeout: 1\n" + JOB + "  w3: {members: [leader], timeout: 100}\n",
                     "t.yaml")
    leader = timeouts.chains(topology)["leader"]
    assert (leader.timeout.seconds, leader.timeout_world, leader.timeout.source) == \
        (100.0, "w3", timeouts.WORLD)
    assert leader.timeout.pos is not None and leader.timeout.pos.line == 7  # 0-based
    assert (leader.hang.seconds, leader.hang.source, leader.hang.note) == \
        (300.0, timeouts.DEFAULT, "3 x 100s")  # above the longest call, not the shortest
    assert leader.rejoin.seconds == 2 * 300 + timeouts.RESTART_ALLOWANCE
    worker = timeouts.chains(topology)["worker-0"]
    assert (worker.timeout.seconds, worker.timeout.source) == (1.0, timeouts.TOP)
    assert (worker.hang.seconds, worker.hang.note) == (60.0, "at least 1m")
    # Its peers in w1 outwait the leader's hang, the longest of that world's members.
    assert (worker.rejoin.seconds, worker.rejoin_world) == (690.0, "w1")
    assert worker.beat == 0.2  # five beats per call timeout, as the library keeps


def test_a_written_hang_timeout_shortens_the_default_call_timeout():
    topology = parse("hang_timeout: 6\n" + JOB.replace("{cmd: x}", "{cmd: x, hang_timeout: 3}"),
                     "t.yaml")
    assert topology.worlds["w1"].timeout == 1.0  # a third of its members' shortest, 3 s
    chain = timeouts.chains(topology)["worker-0"]
    assert (chain.timeout.seconds, chain.timeout.note) == (1.0, "hang_timeout 3s / 3")
    assert (chain.hang.seconds, chain.hang.source) == (6.0, timeouts.TOP)
    assert timeouts.chains(topology)["leader"].hang.source == timeouts.PROCESS


@pytest.mark.parametrize("text, expected", [
    ("timeout: 30\nhang_timeout: 30\n" + JOB,
     ["t.yaml:1:10: timeout 30s of world 'w1' (top level) is not below hang_timeout 30s of"
      " its member 'leader' (top level, t.yaml:2:15): a call may block for its whole"
      " timeout without its process being declared hung; shorten the timeout or lengthen"
      " hang_timeout"]),
    (JOB.replace("{cmd: x}", "{cmd: x, hang_timeout: 20}")
     + "  w3: {members: [leader], timeout: 45}\n",
     ["t.yaml:7:36: timeout 45s of world 'w3' is not below hang_timeout 20s of"
      " its member 'leader' (process, t.yaml:2:34)"]),
    ("hang_timeout: 0.2\n" + JOB,
     ["t.yaml:1:15: process 'leader': hang_timeout 0.2s (top level, t.yaml:1:15) leaves"
      " room for fewer than 5 heartbeats (one per 0.05s at the fastest); give at least"
      " 0.25s"]),
])
def test_numbers_written_out_of_order_are_refused_where_they_are_written(text, expected):
    found = problems(text)
    assert len(found) == len(expected), found
    for got, want in zip(found, expected, strict=True):
        assert got.startswith(want), got


def test_hang_detection_off_never_breaks_the_order():
    parse("timeout: 1000\nhang_timeout: .inf\n" + JOB, "t.yaml")


def test_dry_run_prints_each_processes_chain_with_its_sources(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("timeout: 10\n" + JOB.replace("{cmd: x}", "{cmd: x, hang_timeout: 40}"))
    result = CliRunner().invoke(main, ["launch", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("Timeouts, in order: call timeout < hang_timeout < peers' rejoin()"
                        " deadline")
    header, *rows = lines[start + 1:start + 5]
    assert header.split("  ")[0] == "PROCESS"
    cells = {row.split()[0]: [c.strip() for c in row.split("  ") if c.strip()][1:]
             for row in rows}
    # The leader's own 40 s, its workers' 3 x 10 s and at least a minute: each world's
    # rejoin() outwaits the longest hang among its members.
    assert cells["leader"] == [f"10s in w1 (top level, {path}:1:10)", "every 2s",
                               f"40s (process, {path}:3:34)",
                               "210s in w1 (default, 2 x hang_timeout 60s + 90s)"]
    assert cells["worker-0"] == [f"10s in w1 (top level, {path}:1:10)", "every 2s",
                                 "60s (default, at least 1m)",
                                 "210s in w1 (default, 2 x hang_timeout 60s + 90s)"]
    assert cells["worker-1"][2:] == ["60s (default, at least 1m)",
                                     "210s in w2 (default, 2 x hang_timeout 60s + 90s)"]
    # And the deadline reaches each process, for its rejoin() to use.
    assert '"rejoin":210.0' in result.output


def test_dry_run_json_carries_the_chain_and_no_deadline_as_null(tmp_path):
    import json

    path = tmp_path / "job.yaml"
    path.write_text("hang_timeout: .inf\n" + JOB)
    result = CliRunner().invoke(main, ["launch", str(path), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["worlds"]["w1"]["rejoin"] is None  # hang detection off: rejoin() waits
    assert plan["processes"]["leader"]["timeouts"] == {
        "timeout": {"seconds": 30.0, "from": "default", "world": "w1"},
        "heartbeat": 5.0,
        "hang_timeout": {"seconds": None, "from": f"top level, {path}:1:15"},
        "rejoin": {"seconds": None, "from": "default, hang detection is off",
                   "world": "w1"}}
