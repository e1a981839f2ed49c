import json

import pytest

from mwrun.errors import TopologyError
from mwrun.plan.environment import mwrun_env, process_env
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse

HERE = HostInventory(local=True, cpus=(0, 1, 2, 3), gpus=("0", "1"))


def ports_from(start):
    """A deterministic port chooser that still honours 'taken'."""
    def choose(addr, taken):
        port = start
        while port in taken:
            port += 1
        return port
    return choose


def plan_of(text, inventory=None, python=None):
    topo = parse(text, "t.yaml", "/w")
    inventory = inventory or {name: HERE for name in topo.hosts}
    return place(topo, inventory, ports_from(40000), python)


def errors_of(text, inventory=None):
    with pytest.raises(TopologyError) as info:
        plan_of(text, inventory)
    return [str(d) for d in info.value.diagnostics]


STAR = """\
processes:
  leader: {cmd: python leader.py, cpus: "0-1"}
  worker: {replicas: 2, cmd: python worker.py, cpus: 1}
worlds:
  world1: {members: [leader, worker-0], port: 29501}
  world2: {members: [leader, worker-1]}
"""


def test_star_plan():
    plan = plan_of(STAR, python="/venv/bin/python")
    leader = plan.processes["leader"]
    assert leader.worlds == {"world1": 0, "world2": 0}
    assert leader.primary == "world1"
    assert leader.cpus == (0, 1)
    assert plan.processes["worker-0"].cpus == (2,)
    assert plan.processes["worker-1"].cpus == (3,)
    assert plan.processes["worker-1"].worlds == {"world2": 1}
    assert leader.cmd == ("/venv/bin/python", "leader.py")
    assert plan.worlds["world1"].port == 29501 and not plan.worlds["world1"].port_auto
    assert plan.worlds["world2"].port == 40000 and plan.worlds["world2"].port_auto
    assert plan.worlds["world2"].addr == "127.0.0.1"
    assert plan.store_host == "localhost"


def test_free_ports_never_clash_with_explicit_ones():
    text = ("processes:\n  a: {cmd: x}\nworlds:\n  w1: {members: [a]}\n"
            "  w2: {members: [a], port: 40000}\n  w3: {members: [a]}\n")
    plan = plan_of(text)
    assert [plan.worlds[w].port for w in ("w1", "w2", "w3")] == [40001, 40000, 40002]


def test_explicit_port_clash_is_reported_at_second_port():
    text = ("processes:\n  a: {cmd: x}\nworlds:\n  w1: {members: [a], port: 29500}\n"
            "  w2: {members: [a], port: 29500}\n")
    assert errors_of(text) == ["t.yaml:5:28: world 'w2': port 29500 is already the port of"
                               " world 'w1'"]


def test_gpus_explicit_then_counts_exclusive():
    text = ("backend: nccl\nprocesses:\n  a: {cmd: x, gpus: 1}\n  b: {cmd: x, gpus: [0]}\n"
            "worlds:\n  w: {members: [a, b]}\n")
    plan = plan_of(text)
    assert plan.processes["b"].gpus == ("0",)
    assert plan.processes["a"].gpus == ("1",)


def test_gpu_indices_map_through_visible_devices():
    inv = HostInventory(local=True, cpus=(0,), gpus=("4", "6"))
    text = "processes:\n  a: {cmd: x, gpus: [1]}\nworlds:\n  w: {members: [a]}\n"
    assert plan_of(text, {"localhost": inv}).processes["a"].gpus == ("6",)


@pytest.mark.parametrize("procs, expected", [
    ("  a: {cmd: x, gpus: [0]}\n  b: {cmd: x, gpus: [0]}\n",
     "t.yaml:3:21: process 'b': GPU 0 on host 'localhost' is already given to 'a'"),
    ("  a: {cmd: x, gpus: [2]}\n  b: {cmd: x}\n",
     "t.yaml:2:21: process 'a': GPU 2 is beyond host 'localhost', which has 2 GPU(s)"),
    ("  a: {cmd: x, gpus: 3}\n  b: {cmd: x}\n",
     "t.yaml:2:21: process 'a': asks for 3 GPUs but host 'localhost' has 2 free (of 2)"),
    ("  a: {cmd: x, gpus: [1]}\n  b: {cmd: x, gpus: 2}\n",
     "t.yaml:3:21: process 'b': asks for 2 GPUs but host 'localhost' has 1 free (of 2)"),
    ("  a: {cmd: x, cpus: '2-3'}\n  b: {cmd: x, cpus: [3]}\n",
     "t.yaml:3:21: process 'b': CPU 3 on host 'localhost' is already given to 'a'"),
    ("  a: {cmd: x, cpus: '8'}\n  b: {cmd: x}\n",
     "t.yaml:2:21: process 'a': CPU 8 is beyond host 'localhost', which has CPUs 0-3"),
    ("  a: {cmd: x, cpus: 3}\n  b: {cmd: x, cpus: 2}\n",
     "t.yaml:3:21: process 'b': asks for 2 CPUs but host 'localhost' has 1 free (of 4)"),
])
def test_device_errors(procs, expected):
    text = f"processes:\n{procs}worlds:\n  w: {{members: [a, b]}}\n"
    assert errors_of(text) == [expected]


def test_counts_avoid_devices_named_later_in_the_file():
    text = ("processes:\n  a: {cmd: x, cpus: 2}\n  b: {cmd: x, cpus: '0-1'}\n"
            "worlds:\n  w: {members: [a, b]}\n")
    plan = plan_of(text)
    assert plan.processes["b"].cpus == (0, 1)
    assert plan.processes["a"].cpus == (2, 3)


def test_remote_host_uses_stated_counts_and_stores_stay_here():
    text = ("hosts:\n  head: {addr: 10.9.0.1}\n  node: {addr: 10.9.0.2, gpus: 1}\n"
            "processes:\n  a: {cmd: x, host: node, gpus: 1}\n  b: {cmd: x, host: head}\n"
            "worlds:\n  w: {members: [a, b]}\n")
    inv = {"head": HERE, "node": HostInventory(local=False, cpus=None, gpus=("0",))}
    plan = plan_of(text, inv)
    assert plan.store_host == "head"
    assert plan.worlds["w"].addr == "10.9.0.1"
    assert plan.processes["a"].gpus == ("0",) and plan.processes["a"].addr == "10.9.0.2"
    # A CPU count needs a known CPU count.
    text2 = text.replace("gpus: 1}\n  b:", "gpus: 1, cpus: 2}\n  b:")
    assert errors_of(text2, inv) == [
        "t.yaml:5:42: process 'a': cannot assign 2 CPUs on host 'node' without knowing how"
        " many it has; state 'cpus: N' under the host"]


def test_a_world_with_every_member_here_keeps_its_store_on_loopback():
    text = ("hosts:\n  head: {addr: 10.9.0.1}\n  node: {addr: 10.9.0.2}\n"
            "processes:\n  a: {cmd: x, host: node}\n  b: {cmd: x, host: head}\n"
            "  c: {cmd: x, host: head}\n"
            "worlds:\n  across: {members: [a, b]}\n  here: {members: [b, c]}\n")
    inv = {"head": HERE, "node": HostInventory(local=False, cpus=None, gpus=())}
    plan = plan_of(text, inv)
    assert plan.worlds["across"].addr == "10.9.0.1"  # node must reach it
    assert plan.worlds["here"].addr == "127.0.0.1"  # no one else needs to
    assert mwrun_env(plan, "c", run_id="r", control="c")["MASTER_ADDR"] == "127.0.0.1"
    loopback = plan_of(text.replace("10.9.0.1", "127.0.0.2"), inv)
    assert loopback.worlds["here"].addr == "127.0.0.2"  # a loopback address already


def test_planning_elsewhere_puts_the_stores_on_the_first_host_without_an_agent():
    text = ("hosts:\n  far: {addr: 10.9.0.2}\nprocesses:\n  a: {cmd: x}\n"
            "worlds:\n  w: {members: [a]}\n")
    inv = {"far": HostInventory(local=False, cpus=None, gpus=())}
    plan = place(parse(text, "t.yaml"), inv, lambda a, t: 40000, here=False)
    assert plan.store_host == "far"  # its only world stays on its loopback


def test_local_rank_counts_members_on_the_same_host():
    text = ("hosts:\n  h1: {addr: 127.0.0.1}\n  h2: {addr: 127.0.0.2}\n"
            "processes:\n  a: {cmd: x, host: h1}\n  b: {cmd: x, host: h2}\n"
            "  c: {cmd: x, host: h1}\n"
            "worlds:\n  w: {members: [a, b, c]}\n")
    plan = plan_of(text)
    assert (plan.processes["c"].local_rank, plan.processes["c"].local_world_size) == (1, 2)
    assert (plan.processes["b"].local_rank, plan.processes["b"].local_world_size) == (0, 1)


def test_environment_of_a_process():
    plan = plan_of(STAR)
    env = mwrun_env(plan, "leader", run_id="star-1", control="/r/control.sock",
                    generations={"world1": 2}, restart_count=1)
    assert env["MASTER_ADDR"] == "127.0.0.1"
    assert env["MASTER_PORT"] == "29501"
    assert (env["RANK"], env["WORLD_SIZE"]) == ("0", "2")
    assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("0", "2")
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    assert env["TORCHELASTIC_RESTART_COUNT"] == "2"  # the primary world's generation
    assert env["MWRUN_RESTART_COUNT"] == "1"
    assert env["MWRUN_PROCESS"] == "leader"
    assert env["MWRUN_RUN_ID"] == "star-1"
    assert env["MWRUN_CONTROL"] == "/r/control.sock"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["OMP_NUM_THREADS"] == "2"
    # rejoin(): its default deadline outwaits the members' hang (2 x 90 s + 90 s).
    assert json.loads(env["MWRUN_WORLDS"]) == {
        "world1": {"rank": 0, "size": 2, "backend": "gloo", "addr": "127.0.0.1",
                   "port": 29501, "generation": 2, "timeout": 30.0, "rejoin": 270.0},
        "world2": {"rank": 0, "size": 2, "backend": "gloo", "addr": "127.0.0.1",
                   "port": 40000, "generation": 0, "timeout": 30.0, "rejoin": 270.0}}
    worker = mwrun_env(plan, "worker-1", run_id="r", control="c")
    assert (worker["RANK"], worker["MASTER_PORT"]) == ("1", "40000")
    assert env["MWRUN_HANG_TIMEOUT"] == "90"  # 3 x the 30 s call timeout


def test_process_env_drops_inherited_mwrun_names_and_adds_user_env():
    text = ("processes:\n  a: {cmd: x, env: {LOG: debug}}\nworlds:\n  w: {members: [a]}\n")
    plan = plan_of(text)
    env = process_env(plan, "a", {"PATH": "/bin", "RANK": "7", "MWRUN_WORLDS": "{}",
                                  "MWRUN_HOST_ADDR": "10.1.1.1", "MWRUN_HOME": "/h",
                                  "TORCHELASTIC_ERROR_FILE": "/e",
                                  "CUDA_VISIBLE_DEVICES": "3", "LOG": "info"},
                      run_id="r", control="c")
    assert env["PATH"] == "/bin" and env["LOG"] == "debug"
    assert env["MWRUN_HOME"] == "/h" and env["MWRUN_HOST_ADDR"] == "127.0.0.1"
    assert "TORCHELASTIC_ERROR_FILE" not in env
    assert env["RANK"] == "0" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert json.loads(env["MWRUN_WORLDS"])["w"]["size"] == 1
    assert "OMP_NUM_THREADS" not in env


def test_python_output_is_unbuffered_unless_the_topology_says_otherwise():
    text = ("processes:\n  a: {cmd: x}\n  b: {cmd: y, env: {PYTHONUNBUFFERED: ''}}\n"
            "worlds:\n  w: {members: [a, b]}\n")
    plan = plan_of(text)
    assert process_env(plan, "a", {}, run_id="r", control="c")["PYTHONUNBUFFERED"] == "1"
    assert process_env(plan, "b", {"PYTHONUNBUFFERED": "1"}, run_id="r",
                       control="c")["PYTHONUNBUFFERED"] == ""
