"""What an agent breaks when a member exits while its head is away (host/breaks.py):
pure, its breakers' start faked."""

import json
import sys

from mwrun.host.breaks import BREAKER, Breaks
from mwrun.launchspec import LaunchSpec


def breaks():
    started = []
    found = Breaks(lambda argv, how, preload, env: started.append((argv, how, preload, env)),
                   lambda spec: {**spec.env, "HOST": "x"})
    return found, started


def spec(name, worlds, preload=("torch",)):
    return LaunchSpec(name, ("python", "w.py"), "/", {"MWRUN_WORLDS": json.dumps(worlds)},
                      preload=preload)


W1 = {"rank": 1, "size": 2, "addr": "10.0.0.1", "port": 29500, "generation": 0}
W2 = {"rank": 0, "size": 3, "addr": "10.0.0.1", "port": 29501, "generation": 4}


def test_each_world_of_the_member_is_broken_at_the_generation_it_last_joined():
    found, started = breaks()
    found.spawned(spec("b", {"w1": W1, "w2": W2}))
    found.heard({"verb": "world", "process": "b", "world": "w1", "generation": 2,
                 "event": "ready"})
    found.heard({"verb": "world", "process": "b", "world": "w1", "generation": 1,
                 "event": "ready"})  # an earlier one, late: never goes back
    found.heard({"verb": "world", "process": "b", "world": "w2", "generation": 9,
                 "event": "broken"})  # not one it joined
    assert found.exited("b", -9) == 2
    args = [(argv[3:], preload, env["HOST"]) for argv, _, preload, env in started]
    assert args == [(["10.0.0.1", "29500", "2", "2", "b was killed by SIGKILL"], ("torch",), "x"),
                    (["10.0.0.1", "29501", "4", "3", "b was killed by SIGKILL"], ("torch",), "x")]
    argv, how, _, _ = started[0]
    assert argv[:3] == [sys.executable, "-m", BREAKER] and how == ("module", BREAKER,
                                                                    tuple(argv[3:]))
    assert found.exited("b", 1) == 0  # told once: its seats went with its exit


def test_a_world_added_later_is_broken_too_and_a_restart_starts_afresh():
    found, started = breaks()
    found.spawned(spec("b", {"w1": W1}))
    found.told("b", {"verb": "add", "world": "pair-1", "spec": {**W2, "generation": 0}})
    found.told("b", {"verb": "drain", "world": "w1"})  # nothing to learn
    found.told("b", {"verb": "add", "world": "bad", "spec": {"addr": "x"}})  # refused
    found.spawned(spec("b", {"w1": {**W1, "generation": 3}}))  # a restart: as told now
    assert found.exited("b", 3) == 1
    assert started[0][0][3:] == ["10.0.0.1", "29500", "3", "2", "b exited with code 3"]


def test_a_process_that_is_no_member_or_unknown_breaks_nothing():
    found, started = breaks()
    found.spawned(LaunchSpec("plain", ("python", "p.py"), "/", {}))
    found.spawned(LaunchSpec("odd", ("python", "p.py"), "/", {"MWRUN_WORLDS": "[1]"}))
    assert found.exited("plain", 0) == found.exited("odd", 0) == found.exited("who", 0) == 0
    assert started == []


def test_breakers_still_running_end_with_their_agent_and_ended_ones_are_let_go():
    import subprocess

    from mwrun.host.helpers import Running

    running = Running()
    done = subprocess.Popen(["true"])
    done.wait()
    slow = subprocess.Popen(["sleep", "60"])
    try:
        running.add(done.pid)  # reaped already: nothing to hold
        running.add(slow.pid)
        assert len(running.fds) == 1
        running.end()
        assert slow.wait(timeout=10) == -9 and running.fds == []
    finally:
        slow.kill()
        slow.wait()
