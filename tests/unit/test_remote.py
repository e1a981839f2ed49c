"""Pure pieces of the head <-> agent link: frames, hello checks, ssh command lines,
reported inventories, Slurm host assignment."""

import pytest

from mwrun import __version__
from mwrun.errors import TopologyError
from mwrun.head.hosts import remote, slurm
from mwrun.host import frames
from mwrun.plan.inventory import HostInventory
from mwrun.plan.topology import parse

TOPO = ("hosts:\n  head: {addr: 10.0.0.1}\n"
        "  node: {addr: 10.0.0.2, ssh: 'u@10.0.0.2:2222', gpus: 2, cpus: 4}\n"
        "processes:\n  a: {cmd: x, host: head}\n  b: {cmd: x, host: node}\n"
        "worlds:\n  w: {members: [a, b]}\n")


def test_frames_survive_any_slicing_and_refuse_garbage():
    stream = b"".join(frames.encode({"kind": "lines", "lines": [str(i)] * i})
                      for i in range(50))
    decoder, got = frames.Decoder(), []
    for i in range(0, len(stream), 7):
        got += decoder.feed(stream[i:i + 7])
    assert [m["lines"] for m in got] == [[str(i)] * i for i in range(50)]
    with pytest.raises(frames.FrameError):
        frames.Decoder().feed(b"Welcome to node1!\n")  # a login banner on stdout
    with pytest.raises(frames.FrameError):
        frames.Decoder().feed(frames.encode({"no": "kind"}))


def test_outbox_keeps_what_the_descriptor_did_not_take():
    box, written = frames.Outbox(), bytearray()
    box.put({"kind": "beat"})
    box.put({"kind": "beat"})

    def slow(data):
        written.extend(data[:5])
        return 5

    while not box.flush(slow):
        pass
    assert frames.Decoder().feed(bytes(written)) == [{"kind": "beat"}] * 2


def test_the_proof_depends_on_secret_and_nonce():
    assert frames.proof("s", "n") == frames.proof("s", "n")
    assert frames.proof("s", "n") != frames.proof("t", "n") != frames.proof("s", "m")


@pytest.mark.parametrize("hello", [
    None, [], ["hello"], "hello", {"kind": "hello"}, {"kind": "hello", "proof": ["x"]},
    {"kind": "hello", "proof": None, "node": ["n1", "n2"]}, {"kind": "beat", "proof": "p"},
    {"kind": "hello", "proof": "0" * 64, "node": "n1"}])
def test_a_connect_back_proves_the_secret_before_anything_is_read(hello):
    # A client that knows no secret gets nowhere, whatever shape it sends (a list
    # where the node name belongs once aborted the launch with a TypeError).
    assert frames.proven(hello, "secret", "nonce") is False


def test_a_right_proof_is_proven_whatever_else_the_hello_says():
    good = {"kind": "hello", "proof": frames.proof("secret", "nonce"), "node": ["odd"]}
    assert frames.proven(good, "secret", "nonce") is True
    assert frames.proven(good, "secret", "other nonce") is False


def test_hello_of_another_version_is_refused():
    link = remote.AgentLink("node", [], "python")
    good = {"kind": "hello", "protocol": frames.PROTOCOL, "version": __version__}
    assert remote.check_hello(link, good) is None
    said = remote.check_hello(link, {**good, "version": "0.0.1"})
    assert "mwrun 0.0.1 (protocol" in said and "install the same version" in said
    assert "before saying hello" in remote.check_hello(link, {"kind": "lines"})


def test_ssh_command_line_never_prompts_and_quotes_the_remote_command():
    argv = remote.ssh_argv("u@h:2222", ("-i", "k"), "/opt/my env/python", "node", "/tmp/c")
    assert argv[:2] == ["ssh", "-T"] and "BatchMode=yes" in argv
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[-3:-1] == ["u@h", "--"] and argv[-5:-3] == ["-i", "k"]
    assert argv[-1].startswith("exec '/opt/my env/python' -m mwrun agent --host node")


def test_reported_inventory_checks_stated_counts():
    topo = parse(TOPO, "t.yaml")
    link = remote.AgentLink("node", [], "python")
    link.hello = {"inventory": {"cpus": [0, 1, 2, 3, 4, 5], "gpus": [0]}}
    known = {"node": HostInventory(False, None, ())}
    with pytest.raises(TopologyError) as caught:
        remote.reported_inventory(topo, {"node": link}, known)
    assert str(caught.value) == "t.yaml:3:3: host 'node': gpus: 2, but node reports 1"
    link.hello["inventory"]["gpus"] = [0, 1, 2]
    inv = remote.reported_inventory(topo, {"node": link}, known)["node"]
    assert inv == HostInventory(False, (0, 1, 2, 3), ("0", "1"))


def test_slurm_hosts_take_the_nodes_in_order():
    text = ("launcher: slurm\nhosts:\n  a: {}\n  b: {addr: 10.9.9.9}\n"
            "processes:\n  p: {cmd: x, host: a}\n  q: {cmd: x, host: b}\n"
            "worlds:\n  w: {members: [p, q]}\n")
    topo = parse(text, "t.yaml")
    filled, mapping = slurm.assign(topo, ["n1", "n2", "n3"], {"n1": "10.0.0.1"}.get)
    assert mapping == {"a": "n1", "b": "n2"}
    assert filled.hosts["a"].addr == "10.0.0.1" and filled.hosts["b"].addr == "10.9.9.9"
    with pytest.raises(TopologyError, match="2 hosts, but the allocation has 1 node"):
        slurm.assign(topo, ["n1"], str)


def test_slurm_needs_an_allocation():
    with pytest.raises(Exception, match="needs a Slurm allocation") as caught:
        slurm.allocation({})
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("name", ["star_ssh", "star_slurm"])
def test_the_shipped_multi_host_configs_parse(name):
    from pathlib import Path

    from mwrun.plan.topology import load

    topo = load(str(Path(__file__).parents[2] / "configs" / f"{name}.yaml"))
    assert topo.launcher == name.split("_")[1]
    assert sum(h.remote for h in topo.hosts.values()) == (2 if name == "star_ssh" else 3)


def test_a_slurm_dry_run_says_where_its_empty_addresses_come_from():
    from pathlib import Path

    from click.testing import CliRunner

    from mwrun.cli.commands import main

    path = Path(__file__).parents[2] / "configs" / "star_slurm.yaml"
    result = CliRunner().invoke(main, ["launch", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1] == ("Addresses left empty come from the allocation (SLURM_JOB_NODELIST)"
                        " at launch.")
    assert "    MASTER_ADDR=" in lines  # empty here: the node's address is known at launch
    local = CliRunner().invoke(main, ["launch", str(path.parent / "star.yaml"), "--dry-run"])
    assert "SLURM_JOB_NODELIST" not in local.output


def test_frames_a_full_pipe_could_not_take_are_sent_as_it_drains():
    """A bring-up's spawns are more than a pipe holds: what is left is written as the
    agent reads (the loop asks ``unsent`` every turn), never held until some later
    frame happens to be sent (it waited for the next beat, 5 s)."""
    import contextlib
    import os
    import selectors

    from mwrun.head.hosts.links import Links
    from mwrun.head.hosts.remote import AgentLink
    from mwrun.schema import HostState as H

    link = AgentLink("h", ["cat"], "python")  # an agent that echoes what it is sent
    link.start()
    try:
        link.state = H.UP
        links = Links({"h": link}, remote.SshReach(), selectors.DefaultSelector(),
                      None, print)
        body = "x" * 4096
        for i in range(64):  # 256 KiB: four times what a pipe holds
            link.send(frames.Kind.SPAWN, name=f"p{i}", body=body)
        assert links.unsent()  # cat has not read it all: it waits on its own output
        decoder, got = frames.Decoder(), []
        while len(got) < 64:
            links.unsent()  # what the loop does every turn
            with contextlib.suppress(BlockingIOError):  # (cat has not echoed more yet)
                got += decoder.feed(os.read(link.out_fd, 1 << 16))
        assert [m["name"] for m in got] == [f"p{i}" for i in range(64)]
        assert not links.unsent()
    finally:
        link.close(wait=5.0)
