"""The simulated job of bench/scale.py (``--only sim``) and the refusal it once met: its
hosts are stand-ins on this machine reached through a stand-in ssh, so its head must
have an address those hosts reach it on, as a real job's does. The check that refuses
a loopback head for such a job is not weakened for it: the bench puts the head on a
bridge of its own (10.232.N.1, tests/integration/testbed.py), never on this machine's
own address, and the check still refuses the loopback one. Addresses here are strings
only: nothing is sent anywhere."""

import sys

import pytest

from bench import scale
from bench.common import NotStarted
from mwrun.errors import TopologyError
from mwrun.plan.topology import parse


def test_the_simulated_job_validates_with_its_head_on_a_link_of_its_own():
    topology = parse(scale.sim_topology(3, "10.232.7.1"), "sim.yaml")
    assert topology.hosts["head"].addr == "10.232.7.1"
    assert {h.ssh for n, h in topology.hosts.items() if n != "head"} == {"h0", "h1", "h2"}
    assert len(topology.processes) == 24 and len(topology.worlds) == 12


def test_an_ipv6_head_validates_too():
    assert parse(scale.sim_topology(1, "fd00::2"), "sim.yaml").hosts["head"].addr == "fd00::2"


@pytest.mark.parametrize("head", ["127.0.0.1", "127.0.0.7", "::1"])
def test_the_simulated_job_with_a_loopback_head_is_still_refused(head):
    with pytest.raises(TopologyError) as raised:
        parse(scale.sim_topology(2, head), "sim.yaml")
    assert f"host 'head': addr {head} is a loopback address" in str(raised.value)


class NoLink:
    """What the sim may touch where no link of its own can be made: nothing."""

    @staticmethod
    def missing_link() -> str:
        return "a link of our own needs root"

    @staticmethod
    def bridge():
        raise AssertionError("a link was made where none can be")


def no_launch(*args, **kwargs):
    raise AssertionError("a job was launched where its head has no address")


def test_without_a_link_of_its_own_the_sim_ends_at_once_saying_why(monkeypatch):
    monkeypatch.setattr(scale, "testbed", NoLink)
    monkeypatch.setattr(scale, "Launched", no_launch)
    monkeypatch.setattr(sys, "argv", ["scale.py", "--only", "sim"])
    with pytest.raises(NotStarted, match="sim: not run, its head needs a link of its own:"
                                         " a link of our own needs root"):
        scale.main()


def test_without_a_link_the_sim_alone_is_left_out_of_a_whole_run(monkeypatch, capsys):
    monkeypatch.setattr(scale, "testbed", NoLink)
    monkeypatch.setattr(scale, "Launched", no_launch)
    monkeypatch.setattr(scale, "events", lambda checkout: {"never": "events ran"})
    monkeypatch.setattr(scale, "import_torch_seconds", lambda runs: 1.0)
    monkeypatch.setattr(scale, "fork_seconds", lambda count: 1.0)
    monkeypatch.setattr(scale, "local", lambda *args: {"never": "local ran"})
    monkeypatch.setattr(sys, "argv", ["scale.py"])
    scale.main()
    out = capsys.readouterr().out
    assert "sim: not run, its head needs a link of its own: a link of our own needs root" in out
    assert "events ran" in out and "local ran" in out, out


def test_the_simulated_job_itself_refuses_to_start_without_a_link(monkeypatch, tmp_path):
    monkeypatch.setattr(scale, "testbed", NoLink)
    monkeypatch.setattr(scale, "Launched", no_launch)
    with pytest.raises(NotStarted, match="needs a link of its own"):
        scale.simulated(tmp_path, 2, 0.5, 1, None)
