"""The agents' parts, with scripted frames and no processes: the head's side (the links'
life, the remote processes, the hosts' clocks, the frames routed between them) and a
host's relay of its libraries' messages."""

import json
import selectors
import socket

import pytest

from mwrun import __version__
from mwrun.errors import StartError
from mwrun.head.hosts.agents import Agents
from mwrun.host import frames
from mwrun.host.jsonlines import MAX_UNSENT, REQUESTS_PER_TURN
from mwrun.host.relay import Relay
from mwrun.launchspec import LaunchSpec
from mwrun.schema import HostState as H


class FakeLink:
    """An agent's link that only records: what was sent, whether it was closed."""

    def __init__(self, name: str, state=H.UP):
        self.name, self.state = name, state
        self.hello = {"control": f"/tmp/{name}.sock", "pid": 7} if state == H.UP else None
        self.sent: list[dict] = []
        self.closed = False
        self.local = False  # a remote host's
        self.popen = None  # no process behind it
        self.out_fd = self.err_fd = -1
        self.heard = self.sent_at = 0.0

    def send(self, kind, **fields):
        self.sent.append({"kind": kind, **fields})

    def close(self, wait=3.0):
        self.closed = True

    def kinds(self) -> list[str]:
        return [m["kind"] for m in self.sent]


class FakeLoop:
    def __init__(self):
        self.told: list[tuple] = []
        self.relayed: list = []  # the library messages its agents relayed
        self.now = 1000.0

    def spawned(self, name, pid, warm, at=None):
        self.told.append(("spawned", name, pid, warm, at))

    def failed(self, name, error):
        self.told.append(("failed", name, error))

    def lines(self, name, lines):
        self.told.append(("lines", name, lines))

    def exited(self, name, code, at=None):
        self.told.append(("exited", name, code, at))

    def lost(self, name, reason):
        self.told.append(("lost", name, reason))

    def say(self, text):
        self.told.append(("say", text))

    def wall(self):
        return self.now


class NoReach:
    def again(self, link):
        raise AssertionError("not in these tests")

    def close(self, wait=0.0):
        pass


def spec(name: str) -> LaunchSpec:
    return LaunchSpec(name=name, argv=("python", "x.py"), cwd="/", env={})


def make(kept=lambda told: None):
    loop, node = FakeLoop(), FakeLink("node")
    agents = Agents({"node": node}, loop, NoReach(), lambda name: "node",
                    selectors.DefaultSelector(), loop.relayed.append, kept=kept)
    return agents, loop, node


def test_a_remote_start_is_told_when_its_agent_says_so_and_its_times_are_the_heads():
    agents, loop, node = make()
    agents.reached(node)  # a new agent: its clock is asked
    agents.arrived(node, [{"kind": "clock", "sent": 1000.0, "at": 1005.0}])  # 5 s ahead
    assert node.kinds() == ["clock", "clock"]
    assert agents.start(spec("a")) is None
    assert node.sent[-1]["kind"] == "spawn" and node.sent[-1]["name"] == "a"
    assert agents.status("a") is None and node.kinds()[-1] == "spawn"  # no pid: no probe
    agents.arrived(node, [{"kind": "spawned", "name": "a", "pid": 42, "warm": True,
                           "t": 1004.0},
                          {"kind": "lines", "name": "a", "lines": ["hi", 3]},
                          {"kind": "lines", "name": "stranger", "lines": ["x"]}])
    assert loop.told == [("spawned", "a", 42, True, 999.0), ("lines", "a", ["hi", "3"])]
    assert agents.status("a") is None and node.sent[-1] == {"kind": "probe", "name": "a"}
    agents.status("a")
    assert node.kinds().count("probe") == 1  # one on its way at a time
    agents.arrived(node, [{"kind": "probed", "name": "a", "status": "running", "cpu": 0.5,
                           "rss": 10}])
    assert agents.status("a") == "running" and agents.usage("a") == (0.5, 10)
    assert agents.tell("a", {"verb": "add"}) and not agents.tell("b", {"verb": "add"})
    agents.arrived(node, [{"kind": "exited", "name": "a", "code": 3, "t": 1006.0}])
    assert loop.told[-1] == ("exited", "a", 3, 1000.0)  # never later than its arrival
    assert agents.status("a") is None and agents.close() == {}


def test_a_lost_host_fails_its_processes_and_a_start_there_is_refused():
    agents, loop, node = make()
    agents.start(spec("a"))
    agents.start(spec("b"))
    agents.arrived(node, [{"kind": "failed", "name": "b", "error": "no such file"}])
    moves = agents.moves
    agents.links.lost(node, "its link closed")
    assert node.closed and node.state == H.LOST and agents.moves == moves + 1
    assert loop.told == [("failed", "b", "no such file"), ("say", "host node lost: its link"
                         " closed"), ("lost", "a", "host node lost")]
    assert not agents.up("node") and agents.states() == {"node": H.LOST}
    assert agents.pids() == {}
    with pytest.raises(StartError, match="host node is not reachable"):
        agents.start(spec("a"))
    agents.signal("a", 9)  # forgotten with its host: nothing is sent
    assert node.kinds() == ["spawn", "spawn"]


def test_a_host_reached_again_is_up_once_its_hello_is_checked():
    agents, loop, _ = make()
    fresh = FakeLink("node", state=H.CONNECTING)
    agents.arrived(fresh, [{"kind": "hello", "protocol": frames.PROTOCOL, "version": "0",
                            "control": "/tmp/x.sock"}])
    assert fresh.state == H.LOST and "install the same version" in loop.told[0][1]
    again = FakeLink("node", state=H.CONNECTING)
    agents.arrived(again, [{"kind": "hello", "protocol": frames.PROTOCOL,
                            "version": __version__, "control": "/tmp/y.sock"}])
    assert again.state == H.UP and again.kinds() == ["clock"]  # measured afresh
    assert loop.told[-1] == ("say", "host node is reachable again")


def test_a_stopping_job_is_told_to_every_agent_and_to_one_reached_later():
    """Each agent's queued starts are refused once the job stops (host/asks.py), the
    agent of a host reached again after the stop began included."""
    agents, _, node = make()
    agents.stopping()
    assert node.kinds() == ["stopping"]
    again = FakeLink("node", state=H.CONNECTING)
    agents.arrived(again, [{"kind": "hello", "protocol": frames.PROTOCOL,
                            "version": __version__, "control": "/tmp/y.sock"}])
    assert again.kinds() == ["clock", "stopping"]


def test_the_close_tells_every_agent_and_counts_the_untold_exits_as_killed():
    agents, _, node = make()
    agents.start(spec("a"))
    assert agents.close() == {"a": -9}
    assert node.closed


def test_the_agents_are_the_hands_of_the_router():
    """Where a process runs: the agent's socket; the agent said its pid."""
    agents, _, _ = make()
    assert agents.hosts() == {"node"} and agents.up("node")
    assert agents.control_path("node") == "/tmp/node.sock" and agents.pids() == {"node": 7}


# -- a host's relay --------------------------------------------------------------------------


class Uplink:
    def __init__(self):
        self.sent: list[dict] = []
        self.gone: str | None = None  # why the head is away, once it is

    def send(self, kind, **fields):
        self.sent.append({"kind": kind, **fields})

    def away(self):
        return self.gone


def test_heartbeats_are_held_and_anything_else_sends_them_first(tmp_path):
    clock = [10.0]
    up = Uplink()
    with selectors.DefaultSelector() as selector:
        relay = Relay(str(tmp_path / "agent.sock"), selector, up, lambda: clock[0])
        relay.listen()
        lib = socket.socket(socket.AF_UNIX)
        lib.connect(str(tmp_path / "agent.sock"))

        def turn():
            for key, _ in selector.select(1.0):
                callback, arg = key.data
                callback(arg)

        def say(*messages):
            lib.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
            turn()

        turn()  # accepted
        say({"verb": "hello", "process": "a", "interval": 2.0})
        assert up.sent == [{"kind": "control", "request": {"verb": "hello", "process": "a",
                                                           "interval": 2.0}}]
        say({"verb": "heartbeat", "process": "a"}, {"verb": "stop"})  # not the library's
        assert len(up.sent) == 1 and relay.held_until == 10.5  # a quarter interval
        relay.release(10.4)
        assert len(up.sent) == 1
        relay.release(10.5)
        assert up.sent[-1] == {"kind": "control", "requests": [{"verb": "heartbeat",
                                                                "process": "a",
                                                                "hold": 0.5}]}
        assert relay.held_until is None
        say({"verb": "heartbeat", "process": "a"}, {"verb": "bye", "process": "a"})
        assert [m.get("requests", m.get("request")) for m in up.sent[-2:]] == [
            [{"verb": "heartbeat", "process": "a", "hold": 0.5}], {"verb": "bye", "process": "a"}]
        relay.tell("a", {"verb": "drain"})
        relay.tell("nobody", {"verb": "drain"})
        assert lib.recv(100) == b'{"verb": "drain"}\n'
        lib.close()
        turn()  # its end: no more lines down to it
        assert relay.library == {}
        relay.close()
    assert not (tmp_path / "agent.sock").exists()


@pytest.fixture
def relay_and_library(tmp_path):
    """A relay listening, one library connected to it and accepted, and a turn of the
    agent's loop (the callbacks of one select())."""
    up = Uplink()
    with selectors.DefaultSelector() as selector:
        relay = Relay(str(tmp_path / "agent.sock"), selector, up, lambda: 0.0)
        relay.listen()
        lib = socket.socket(socket.AF_UNIX)
        lib.connect(str(tmp_path / "agent.sock"))

        def turn(timeout=1.0):
            for key, _ in selector.select(timeout):
                callback, arg = key.data
                callback(arg)

        turn()  # accepted
        yield relay, lib, up, turn
        lib.close()
        turn(0.1)  # its end, if its connection was not dropped already
        relay.close()


def test_a_library_saying_much_at_once_is_served_a_share_per_turn_and_in_order(
        relay_and_library):
    """The relay is the head's JSON-lines server (host/jsonlines.py): a library cannot
    hold the agent's loop with thousands of lines; what is left waits in the backlog,
    which the loop serves each turn (and does not sleep on)."""
    relay, lib, up, turn = relay_and_library
    said = [{"verb": "bye", "process": "a", "pid": i} for i in range(3 * REQUESTS_PER_TURN)]
    lib.sendall(b"".join(json.dumps(m).encode() + b"\n" for m in said))
    while len(up.sent) < REQUESTS_PER_TURN:
        turn()
    assert len(up.sent) == REQUESTS_PER_TURN and relay.backlog
    while relay.backlog:
        relay.serve()
    assert [m["request"] for m in up.sent] == said


def test_a_library_that_does_not_read_its_lines_is_dropped(relay_and_library):
    relay, lib, _, turn = relay_and_library
    lib.sendall(json.dumps({"verb": "hello", "process": "a", "pid": 1, "interval": 1.0}
                           ).encode() + b"\n")
    turn()
    assert set(relay.library) == {"a"}
    big = {"verb": "drain", "pad": "x" * 65536}
    for _ in range(MAX_UNSENT // 65536 + 64):  # far more than its socket holds
        relay.tell("a", big)
        if not relay.library:
            break
    assert relay.library == {}  # no longer told: its lines are not kept for it


def test_a_scale_while_the_head_is_away_is_refused_at_once_and_the_rest_kept(
        relay_and_library):
    """Nobody would answer a job.scale: the library hears why at once (never a hang);
    what it says that needs no answer is kept for a new head as ever."""
    _, lib, up, turn = relay_and_library
    up.gone = "its link closed"
    lib.sendall(b'{"verb": "scale", "process": "a", "pid": 1, "id": "r1", "target": "w",'
                b' "count": 2}\n{"verb": "bye", "process": "a", "pid": 1}\n')
    turn()
    assert [m["request"]["verb"] for m in up.sent] == ["bye"]
    reply = json.loads(lib.recv(4096))
    assert reply["verb"] == "reply" and reply["id"] == "r1" and reply["ok"] is False
    assert "the head is away (its link closed)" in reply["error"]


def test_a_hello_without_its_interval_is_relayed_and_the_relay_goes_on(relay_and_library):
    relay, lib, up, turn = relay_and_library
    lib.sendall(b'{"verb": "hello", "process": "a", "pid": 1}\n'
                b'{"verb": "bye", "process": "a", "pid": 1}\n')
    turn()
    assert [m["request"]["verb"] for m in up.sent] == ["hello", "bye"]
    assert set(relay.library) == {"a"}


def test_the_keepers_host_lost_before_it_answered_is_the_keepers_failure():
    """The store host's agent asked for the keeper, then lost: that start is failed
    (the run ends saying so), never waited for; an answer that came is no longer."""
    kept = []
    agents, _, node = make(kept=kept.append)
    agents.keeper("node", {"args": ["--connect", "/tmp/k.sock"]})
    assert node.kinds() == ["keeper"]
    agents.links.lost(node, "its link closed")
    assert len(kept) == 1 and "was lost before it started" in kept[0]["error"]
    agents, _, node = make(kept=kept.append)
    agents.keeper("node", {"args": []})
    agents.arrived(node, [{"kind": "kept", "pid": 42, "warm": True}])
    agents.links.lost(node, "its link closed")
    assert kept[-1] == {"kind": "kept", "pid": 42, "warm": True}
