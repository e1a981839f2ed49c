"""The simulated job of bench/scale.py (``--only sim``) and the refusal it once met: its
hosts are stand-ins on this machine reached through a stand-in ssh, so its head must
have an address those hosts reach it on, as a real job's does. The check that refuses
a loopback head for such a job is not weakened for it: the bench gives the head this
machine's own address instead, and the check still refuses the loopback one."""

import pytest

from bench import scale
from bench.common import NotStarted
from mwrun.errors import TopologyError
from mwrun.plan.topology import parse


def test_the_simulated_job_validates_with_its_head_on_a_real_address():
    topology = parse(scale.sim_topology(3, "192.0.2.2"), "sim.yaml")
    assert topology.hosts["head"].addr == "192.0.2.2"
    assert {h.ssh for n, h in topology.hosts.items() if n != "head"} == {"h0", "h1", "h2"}
    assert len(topology.processes) == 24 and len(topology.worlds) == 12


def test_an_ipv6_head_validates_too():
    assert parse(scale.sim_topology(1, "fd00::2"), "sim.yaml").hosts["head"].addr == "fd00::2"


@pytest.mark.parametrize("head", ["127.0.0.1", "127.0.0.7", "::1"])
def test_the_simulated_job_with_a_loopback_head_is_still_refused(head):
    with pytest.raises(TopologyError) as raised:
        parse(scale.sim_topology(2, head), "sim.yaml")
    assert f"host 'head': addr {head} is a loopback address" in str(raised.value)


def test_the_head_gets_an_address_that_is_neither_loopback_nor_link_local(monkeypatch):
    monkeypatch.setattr(scale, "local_addresses",
                        lambda: {"127.0.0.1", "::1", "fe80::1", "fd00::2", "10.1.2.3"})
    assert scale.head_address() == "10.1.2.3"  # IPv4 first
    monkeypatch.setattr(scale, "local_addresses", lambda: {"::1", "fe80::1", "fd00::2"})
    assert scale.head_address() == "fd00::2"


def test_a_machine_with_loopback_alone_ends_the_bench_saying_why(monkeypatch):
    monkeypatch.setattr(scale, "local_addresses", lambda: {"127.0.0.1", "::1", "fe80::1"})
    with pytest.raises(NotStarted, match="no address but loopback"):
        scale.head_address()
