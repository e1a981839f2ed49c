"""The phases of a fault (head/faults.py), from the real supervisor's events on a fake
host and a fake clock, with what the library tells (joins, first calls) scripted."""

import signal

from mwrun.head.hosts.clocks import Offset
from mwrun.head.observe.faults import Faults
from mwrun.schema import Event as E
from mwrun.schema import Phase
from mwrun.schema import WorldState as W
from tests.unit.test_supervisor import FakeHost, join_all, make

PHASES = [p.value for p in Phase]


def tracked(hear=None):
    """A supervisor whose faults are tracked: (sup, host, faults, written records);
    ``hear(event, faults)`` hears each event after the faults (as the history does)."""
    host, written = FakeHost(), []
    box = {}
    faults = Faults({"leader": ["world1", "world2"], "worker-0": ["world1"],
                     "worker-1": ["world2"]},
                    {"world1": ["leader", "worker-0"], "world2": ["leader", "worker-1"]},
                    lambda w: box["sup"].worlds[w].generation, written.append, host.wall)
    after = () if hear is None else (lambda event: hear(event, faults),)
    sup, _ = make(host=host, subscribers=(faults, *after))
    box["sup"] = sup
    join_all(sup)
    return sup, host, faults, written


def rejoin(sup, host, faults, world="world1", members=("leader", "worker-0")):
    """Every member joins the world's next generation, one 10 ms after the other, and
    says so (the library's "ready", stamped with its own time)."""
    generation = sup.worlds[world].generation
    for name in members:
        host.t += 0.01
        faults.joined(world, generation, host.wall())
        sup.members.on_world_event(name, sup.procs[name].worker.pid, world, generation, "ready")
    return generation


def test_a_drill_is_timed_from_the_signal_through_the_first_call():
    sup, host, faults, written = tracked()
    t0 = host.wall()
    sup.drills.kill_world("world1", None, signal.SIGKILL)
    host.t += 0.002
    sup.on_exit("worker-0", -9)  # seen 2 ms later; the break is written at once
    host.t += 0.05
    sup.on_tick()  # restarted 50 ms later
    generation = rejoin(sup, host, faults)
    assert written == []  # open until its first call
    shown = faults.last_fault("world1")
    assert shown["open"] and shown["at"] == round(t0, 4)
    assert shown["phases"]["exit_seen"] == 0.002 and shown["phases"]["first_call"] is None
    faults.first_call("world1", generation, host.wall() + 0.005)
    [record] = written
    assert record["event"] == E.FAULT and record["world"] == "world1"
    assert record["generation"] == 0 and record["process"] == "worker-0"
    assert record["signal"] == "SIGKILL" and "worker-0 was killed by SIGKILL" in record["cause"]
    phases = record["phases"]
    assert list(phases) == PHASES
    assert phases["t_fault"] == round(t0, 4)
    assert phases["exit_seen"] == phases["survivors_told"] == round(t0 + 0.002, 4)
    assert phases["restarted"] == round(t0 + 0.052, 4)
    assert phases["reformed"] == round(t0 + 0.072, 4)  # the last member's join
    assert phases["first_call"] == round(t0 + 0.077, 4)
    assert not faults.last_fault("world1")["open"]
    assert faults.last_fault("world2") is None  # world2 never broke


def test_a_crash_nobody_signalled_starts_when_its_exit_is_seen():
    sup, host, faults, _written = tracked()
    host.t += 1.0
    sup.on_exit("worker-1", -11)
    fault = faults.last_fault("world2")
    assert fault["signal"] == "SIGSEGV" and fault["process"] == "worker-1"
    assert fault["phases"]["t_fault"] == 0.0 and fault["phases"]["exit_seen"] == 0.0
    assert fault["at"] == round(host.wall(), 4)


def test_an_exit_seen_by_a_remote_agent_keeps_the_agents_time():
    sup, host, faults, _written = tracked()
    sup.on_exit("worker-0", 1, at=host.wall() - 0.003)  # the agent saw it 3 ms before
    phases = faults.last_fault("world1")["phases"]
    assert phases == {**phases, "t_fault": 0.0, "exit_seen": 0.0, "survivors_told": 0.003}


def test_a_lost_host_has_no_time_of_fault():
    sup, host, faults, _written = tracked()
    sup.on_exit("worker-0", None, lost="host h1 lost")
    fault = faults.last_fault("world1")
    assert fault["phases"]["t_fault"] is None and fault["phases"]["exit_seen"] == 0.0
    assert fault["at"] == round(host.wall(), 4)
    assert fault["cause"] == "worker-0 failed: host h1 lost"


def test_a_death_while_the_world_is_broken_belongs_to_the_same_fault():
    """A member dies while its peer is still to restart: no break is said (the world
    is broken already) and the generation opened for their return is spent, but the
    world is one outage: one fault, its phases the first of each."""
    sup, host, faults, written = tracked()
    sup.on_exit("worker-0", -9)
    t0 = host.wall()
    host.t += 0.1
    sup.on_exit("leader", -9)  # world1 still broken: worker-0 restarts only at the tick
    assert not [r for r in written if r["world"] == "world1"]
    fault = faults.last_fault("world1")
    assert fault["open"] and fault["generation"] == 0 and fault["process"] == "worker-0"
    assert fault["at"] == round(t0, 4) and fault["phases"]["exit_seen"] == 0.0
    assert faults.last_fault("world2")["generation"] == 0  # a break said for world2
    assert faults.last_fault("world2")["id"] != fault["id"]


def test_a_restart_killed_again_before_the_re_form_is_one_fault():
    sup, host, faults, written = tracked()
    sup.on_exit("worker-0", -9)
    t0 = host.wall()
    sup.on_tick()  # restarted
    restarted = host.wall()
    host.t += 0.5
    sup.on_exit("worker-0", 1)  # dies again before the world re-formed
    assert written == []
    fault = faults.last_fault("world1")
    assert fault["open"] and fault["generation"] == 0 and fault["breaks"] == 2
    assert fault["signal"] == "SIGKILL" and fault["cause"] == "worker-0 was killed by SIGKILL"
    host.t += 2.0
    sup.on_tick()
    generation = rejoin(sup, host, faults)
    assert generation == 2
    faults.first_call("world1", generation, host.wall())
    [record] = written
    assert record["id"] == fault["id"] and record["breaks"] == 2
    assert record["phases"]["t_fault"] == round(t0, 4)
    assert record["phases"]["restarted"] == round(restarted, 4)  # the first restart
    assert record["phases"]["reformed"] is not None


def test_a_new_fault_after_the_re_form_closes_the_last_one_and_takes_a_new_id():
    sup, host, faults, written = tracked()
    sup.drills.kill_world("world1", None, signal.SIGKILL)
    first = faults.last_fault("world1")["id"]
    sup.on_exit("worker-0", -9)
    sup.on_tick()
    rejoin(sup, host, faults)  # re-formed; its first call not heard yet
    host.t += 1.0
    sup.drills.kill_world("world1", None, signal.SIGKILL)
    [record] = written
    assert record["id"] == first and record["phases"]["reformed"] is not None
    assert record["phases"]["first_call"] is None
    second = faults.last_fault("world1")
    assert second["id"] == first + 1 and second["open"] and second["breaks"] == 0


def test_each_event_of_a_fault_is_tagged_with_its_id():
    """The history joins on these: the drill's signal, the exit, the break, the
    restart, the re-form all carry the same id; events of no fault carry none."""
    tags = []
    sup, host, faults, _written = tracked(lambda event, faults: tags.append(
        (type(event).__name__, faults.tags(event))))
    sup.drills.kill_world("world1", None, signal.SIGKILL)
    sup.on_exit("worker-0", -9)
    sup.on_tick()
    rejoin(sup, host, faults)
    got = {name: tag for name, tag in tags if tag}
    fault = faults.last_fault("world1")["id"]
    assert got == {"Signalled": {"faults": {"world1": fault}},
                   "Exited": {"faults": {"world1": fault}},
                   "WorldBroken": {"fault": fault}, "Spawned": {"faults": {"world1": fault}},
                   "WorldFormed": {"fault": fault}}
    assert all(not tag for name, tag in tags if name == "Said")


def test_a_hang_is_timed_from_its_kill_and_a_stop_closes_what_is_open():
    sup, host, faults, written = tracked()
    sup.beats.hang(sup.procs["worker-1"], "silent for 90s")
    t_kill = host.wall()
    host.t += 0.01
    sup.on_exit("worker-1", -9)
    assert faults.last_fault("world2")["at"] == round(t_kill, 4)
    assert faults.last_fault("world2")["phases"]["exit_seen"] == 0.01
    sup.request_stop()
    [record] = written
    assert record["world"] == "world2" and record["phases"]["reformed"] is None
    for name, rec in sup.procs.items():
        if rec.state.alive:
            sup.on_exit(name, -15)
    assert len(written) == 1  # exits of the stop are no faults


def test_a_member_that_saw_the_break_first_is_a_fault_of_no_known_process():
    sup, host, faults, _written = tracked()
    leader = sup.procs["leader"]
    faults.broken("world1", 0, host.wall() - 0.004)  # written to the store 4 ms before
    sup.members.on_world_event("leader", leader.worker.pid,
                               "world1", 0, "broken", "a call timed out")
    fault = faults.last_fault("world1")
    assert fault["process"] is None and fault["cause"] == "a call timed out"
    assert fault["phases"]["t_fault"] is None and fault["phases"]["survivors_told"] == 0.0


def test_a_first_call_heard_before_the_re_form_waits_for_it():
    sup, host, faults, written = tracked()
    sup.on_exit("worker-0", -9)
    sup.on_tick()
    faults.first_call("world1", 1, host.wall() + 0.05)  # a beat overtook a "ready"
    rejoin(sup, host, faults)
    [record] = written
    assert record["phases"]["first_call"] == round(host.wall() + 0.03, 4)


def test_a_phase_told_on_another_clock_never_comes_before_its_cause():
    sup, host, faults, written = tracked()
    sup.on_exit("worker-0", -9)
    sup.on_tick()  # restarted now, on the head's clock
    restarted = host.wall()
    generation = sup.worlds["world1"].generation
    for name in ("leader", "worker-0"):  # joins stamped by a clock 3 ms behind
        faults.joined("world1", generation, restarted - 0.003)
        sup.members.on_world_event(name, sup.procs[name].worker.pid, "world1", generation, "ready")
    faults.first_call("world1", generation, restarted - 0.004)
    [record] = written
    phases = record["phases"]
    assert phases["restarted"] == phases["reformed"] == phases["first_call"] == \
        round(restarted, 4)
    times = list(phases.values())
    assert times == sorted(times)


def test_the_clock_offset_keeps_the_shortest_round_trip():
    offset = Offset()
    offset.add(100.0, 105.2, 100.4)  # the agent 5 s ahead, measured in a 0.4 s trip
    offset.add(101.0, 106.01, 101.02)  # a 20 ms trip: the better measurement
    offset.add(102.0, 150.0, 103.0)  # a slow trip is ignored
    assert round(offset.offset, 6) == 5.0 and offset.wanted
    assert round(offset.to_head(206.0), 6) == 201.0


def test_a_stop_drill_is_timed_from_the_stop_not_the_hang_kill_it_led_to():
    sup, host, faults, _written = tracked()
    sup.drills.kill_world("world1", 1, signal.SIGSTOP)
    t_stop = host.wall()
    host.t += 90.0
    sup.beats.hang(sup.procs["worker-0"], "stopped for 90s")
    host.t += 0.01
    sup.on_exit("worker-0", -9)
    fault = faults.last_fault("world1")
    assert fault["signal"] == "SIGSTOP" and fault["at"] == round(t_stop, 4)
    assert fault["phases"]["exit_seen"] == 90.01


def test_a_stop_drill_whose_peer_timed_out_first_is_one_fault_from_the_stop():
    """SIGSTOP; the leader's call times out (it writes the break itself); the stopped
    member is declared hung and killed (the world breaks again); restarted, re-formed:
    one fault, timed from the stop, each phase the first of its kind."""
    sup, host, faults, written = tracked()
    sup.drills.kill_world("world1", 1, signal.SIGSTOP)
    t_stop = host.wall()
    assert faults.last_fault("world1")["open"]  # a fault from the moment it starts
    host.t += 10.0
    faults.broken("world1", 0, host.wall())
    sup.members.on_world_event("leader", sup.procs["leader"].worker.pid, "world1", 0, "broken",
                               "a call timed out")
    t_told = host.wall()
    host.t += 20.0
    sup.beats.hang(sup.procs["worker-0"], "stopped for 30s")
    host.t += 0.01
    sup.on_exit("worker-0", -9)
    sup.on_tick()
    generation = rejoin(sup, host, faults)
    faults.first_call("world1", generation, host.wall())
    [record] = written
    assert record["process"] == "worker-0" and record["signal"] == "SIGSTOP"
    assert record["breaks"] == 2 and record["generation"] == 0
    assert record["cause"] == "a call timed out"
    phases = record["phases"]
    assert phases["t_fault"] == round(t_stop, 4)
    assert phases["survivors_told"] == round(t_told, 4)
    assert phases["exit_seen"] == round(t_stop + 30.01, 4)
    assert None not in phases.values()


def test_a_remote_time_is_never_later_than_the_frame_that_told_it():
    """The offset is good to a few ms: a corrected exit time past the moment its frame
    arrived would land after the break the head wrote because of it."""
    from types import SimpleNamespace

    from mwrun.head.hosts.hostclocks import Clocks

    wall = [100.0]
    clocks = Clocks(lambda: wall[0])
    asked = []
    link = SimpleNamespace(name="node1", send=lambda kind, **fields: asked.append(kind))
    clocks.measure(link, fresh=True)
    clocks.answered(link, {"kind": "clock", "sent": 100.0, "at": 105.0})  # 5 s ahead
    assert asked == ["clock", "clock"]  # asked again: one sample is not enough
    wall[0] = 201.0
    assert clocks.to_head("node1", 205.5) == 200.5  # corrected
    assert clocks.to_head("node1", 206.2) == 201.0  # not after its arrival
    assert clocks.to_head("node1", "soon") is None


def test_a_signal_starts_no_fault_in_a_world_closed_for_good():
    sup, _, faults, _ = tracked()
    sup.on_exit("worker-1", 0)  # finished: world2 closes for good
    assert sup.worlds["world2"].state is W.CLOSED
    sup.drills.kill_world("world1", 0, signal.SIGSTOP)  # the leader, in both worlds
    assert faults.last_fault("world1")["open"]
    assert faults.last_fault("world2") is None


def test_a_remote_exit_told_before_its_cause_is_moved_to_it_and_said():
    """A remote worker's exit, on its agent's clock corrected by an offset measured
    19 ms off: told before the drill's signal that caused it and after the break the
    supervisor wrote on hearing it. Each phase is put at its cause, and the record
    says by how much; a phase told in order is never moved."""
    sup, host, faults, written = tracked()
    sup.drills.kill_world("world1", None, signal.SIGKILL)
    t_fault = host.wall()
    host.t += 0.002
    sup.on_exit("worker-0", -9, at=t_fault - 0.019)  # before the signal: the offset's error
    assert faults.last_fault("world1")["moved"] == {"exit_seen": 0.019}
    host.t += 1.0
    sup.on_tick()
    rejoin(sup, host, faults)
    faults.first_call("world1", sup.worlds["world1"].generation, host.wall() + 0.01)
    [record] = written
    times = list(record["phases"].values())
    assert times == sorted(times) and record["phases"]["exit_seen"] == round(t_fault, 4)
    assert record["moved"] == {"exit_seen": 0.019}

    sup, host, faults, written = tracked()
    host.t += 0.05
    sup.on_exit("worker-0", -9, at=host.wall() + 0.019)  # seen 19 ms after it was told
    assert faults.last_fault("world1")["moved"] == {"survivors_told": 0.019}
    assert faults.last_fault("world1")["phases"]["survivors_told"] == \
        faults.last_fault("world1")["phases"]["exit_seen"]


def test_a_break_a_member_wrote_before_the_exit_was_seen_stays_where_it_was():
    """The member saw its peer gone before the peer's agent saw the exit: no clock
    error, an order that happened (the break follows the fault's start, not the exit)."""
    sup, host, faults, _written = tracked()
    sup.drills.kill_world("world1", None, signal.SIGKILL)
    host.t += 0.004
    leader = sup.procs["leader"]
    faults.broken("world1", 0, host.wall())
    sup.members.on_world_event("leader", leader.worker.pid, "world1", 0, "broken", "gone")
    host.t += 0.01
    sup.on_exit("worker-0", -9, at=host.wall())
    fault = faults.last_fault("world1")
    assert fault["moved"] == {}
    assert fault["phases"]["survivors_told"] == 0.004 and fault["phases"]["exit_seen"] == 0.014
