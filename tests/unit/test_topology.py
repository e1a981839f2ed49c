import textwrap

import pytest

from mwrun.errors import TopologyError
from mwrun.plan.topology import load, parse, parse_cpus

STAR = """\
version: 1
name: star
processes:
  leader:
    cmd: python leader.py --steps 50
    restart: on-failure
  worker:
    replicas: 2
    cmd: [python, worker.py]
worlds:
  world1:
    members: [leader, worker-0]
    port: 29501
  world2:
    members: [leader, worker-1]
"""


def problems(text: str) -> list[str]:
    with pytest.raises(TopologyError) as info:
        parse(textwrap.dedent(text), "t.yaml", "/base")
    return [str(d) for d in info.value.diagnostics]


def one_problem(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


def minimal(extra_process: str = "", extra_world: str = "", top: str = "") -> str:
    return (f"version: 1\n{top}processes:\n  a:\n    cmd: run a\n{extra_process}"
            f"  b:\n    cmd: run b\nworlds:\n  w:\n    members: [a, b]\n{extra_world}")


def test_star_expands_replicas_and_fills_defaults():
    topo = parse(STAR, "configs/star.yaml", "/work/configs")
    assert topo.name == "star"
    assert list(topo.processes) == ["leader", "worker-0", "worker-1"]
    assert topo.processes["worker-1"].replica_of == "worker"
    assert topo.processes["leader"].cmd == ("python", "leader.py", "--steps", "50")
    assert topo.processes["worker-0"].cmd == ("python", "worker.py")
    assert topo.processes["leader"].restart == "on-failure"
    assert topo.processes["worker-0"].restart == "never"
    assert topo.processes["worker-0"].max_restarts == 3
    assert topo.processes["worker-0"].restart_backoff == 1.0
    assert topo.processes["leader"].cwd == "/work/configs"
    assert topo.worlds["world1"].members == ("leader", "worker-0")
    assert topo.worlds["world1"].port == 29501
    assert topo.worlds["world2"].port is None
    assert topo.worlds["world2"].backend == "gloo"
    assert topo.worlds["world2"].timeout == 30.0
    assert topo.worlds["world2"].on_failure == "isolate"
    assert list(topo.hosts) == ["localhost"]
    assert topo.hosts["localhost"].addr == "127.0.0.1"
    assert topo.memberships("leader") == [("world1", 0), ("world2", 0)]


def test_name_defaults_to_file_stem_and_version_is_optional():
    topo = parse(minimal().replace("version: 1\n", ""), "jobs/my-job.yaml", "/x")
    assert topo.name == "my-job"


def test_bare_replicated_name_means_all_replicas_in_order():
    topo = parse("processes:\n  w:\n    replicas: 3\n    cmd: x\n"
                 "worlds:\n  all:\n    members: [w]\n", "t.yaml")
    assert topo.worlds["all"].members == ("w-0", "w-1", "w-2")


def test_cwd_is_relative_to_topology_folder():
    topo = parse(minimal(extra_process="    cwd: ../src\n"), "t.yaml", "/work/configs")
    assert topo.processes["a"].cwd == "/work/src"


def test_defaults_inherit_top_level_backend_and_timeout():
    topo = parse(minimal(top="backend: gloo\ntimeout: 5\n", extra_world="    timeout: 7\n"),
                 "t.yaml")
    assert topo.worlds["w"].timeout == 7.0
    assert topo.timeout == 5.0


def test_hang_timeout_per_process_then_top_level_then_well_above_the_call_timeout():
    default = parse(minimal(top="timeout: 5\n", extra_world="    timeout: 40\n"), "t.yaml")
    assert default.hang_deadline("a") == 120.0  # 3 x the world's 40 s call timeout
    assert parse(minimal(), "t.yaml").hang_deadline("a") == 90.0
    assert parse(minimal(top="timeout: 1\n"), "t.yaml").hang_deadline("a") == 60.0
    topo = parse(minimal(top="hang_timeout: 7\n", extra_process="    hang_timeout: 2.5\n"),
                 "t.yaml")
    assert topo.hang_deadline("a") == 2.5 and topo.hang_deadline("b") == 7.0
    assert parse(minimal(top="hang_timeout: .inf\n"), "t.yaml").hang_deadline("a") == \
        float("inf")  # hang detection off


@pytest.mark.parametrize("text, expected", [
    ("hang_timeout: 0\n", "t.yaml:1:15: hang_timeout must be more than 0, not 0"),
    ("hang_timeout: [1]\n", "t.yaml:1:15: hang_timeout must be a number, not a list"),
    ("hang_timeout: .nan\n", "t.yaml:1:15: hang_timeout must be a number"),
    ("hang_timout: 9\n", "t.yaml:1:1: topology: unknown key 'hang_timout'; did you mean"
                         " 'hang_timeout'?"),
])
def test_hang_timeout_errors_at_the_top(text, expected):
    assert one_problem(text + minimal().replace("version: 1\n", "")).startswith(expected)


def test_hang_timeout_errors_in_a_process():
    assert one_problem(minimal(extra_process="    hang_timeout: -3\n")) == \
        "t.yaml:5:19: process 'a': hang_timeout must be more than 0, not -3"


def test_head_grace_is_seconds_from_zero_and_zero_by_default():
    assert parse(minimal(), "t.yaml").head_grace == 0.0
    assert parse(minimal(top="head_grace: 30\n"), "t.yaml").head_grace == 30.0
    assert parse(minimal(top="head_grace: 0\n"), "t.yaml").head_grace == 0.0


def test_head_restart_is_true_or_false_and_true_by_default():
    assert parse(minimal(), "t.yaml").head_restart is True
    assert parse(minimal(top="head_restart: false\n"), "t.yaml").head_restart is False
    assert parse(minimal(top="head_restart: true\n"), "t.yaml").head_restart is True


@pytest.mark.parametrize("text, expected", [
    ("head_grace: -1\n", "t.yaml:1:13: head_grace must be at least 0, not -1"),
    ("head_grace: .inf\n", "t.yaml:1:13: head_grace must be a finite number of seconds"),
    ("head_grace: soon\n", "t.yaml:1:13: head_grace must be a number, not a string"),
    ("head_restart: 1\n", "t.yaml:1:15: head_restart must be true or false, not a number"),
    ("head_restart: yes please\n",
     "t.yaml:1:15: head_restart must be true or false, not a string"),
    ("version: 2\n", "t.yaml:1:10: version 2 is not supported; use version: 1"),
    ("backend: mpi\n", "t.yaml:1:10: backend must be one of gloo | nccl, not 'mpi'"),
    ("timeout: -1\n", "t.yaml:1:10: timeout must be more than 0, not -1"),
    ("timeout: soon\n", "t.yaml:1:10: timeout must be a number, not a string"),
    ("nmae: x\n", "t.yaml:1:1: topology: unknown key 'nmae'; did you mean 'name'?"),
    ("name: 'my job'\n", "t.yaml:1:7: name 'my job': a name starts with a letter"),
])
def test_top_level_errors(text, expected):
    assert one_problem(text + minimal().replace("version: 1\n", "")).startswith(expected)


@pytest.mark.parametrize("line, expected", [
    ("    cmd2: x\n", "t.yaml:5:5: process 'a': unknown key 'cmd2'; did you mean 'cmd'?"),
    ("    restart: sometimes\n",
     "t.yaml:5:14: process 'a': restart must be one of never | on-failure | always,"
     " not 'sometimes'"),
    ("    max_restarts: -1\n", "t.yaml:5:19: process 'a': max_restarts must be at least 0"),
    ("    max_restarts: 1.5\n",
     "t.yaml:5:19: process 'a': max_restarts must be a whole number, not a number"),
    ("    restart_backoff: [1]\n",
     "t.yaml:5:22: process 'a': restart_backoff must be a number, not a list"),
    ("    gpus: [0, 0]\n", "t.yaml:5:15: process 'a': GPU 0 is listed twice"),
    ("    gpus: many\n", "t.yaml:5:11: process 'a': gpus (a count) must be a whole number"),
    ("    cpus: 3-1\n", "t.yaml:5:11: process 'a': cpus: range '3-1' runs backwards"),
    ("    cpus: 0-1,1\n", "t.yaml:5:11: process 'a': a CPU is listed twice in cpus"),
    ("    cpus: x\n", "t.yaml:5:11: process 'a': cpus: 'x' is not a CPU number or range"),
    ("    cpus: 0\n", "t.yaml:5:11: process 'a': cpus (a count) must be at least 1"),
    ("    env: {RANK: 3}\n", "t.yaml:5:11: process 'a': env: RANK is set by mwrun"),
    ("    env: {MWRUN_X: 3}\n", "t.yaml:5:11: process 'a': env: MWRUN_X is set by mwrun"),
    ("    env: {CUDA_VISIBLE_DEVICES: '0'}\n",
     "t.yaml:5:11: process 'a': env: CUDA_VISIBLE_DEVICES is set by mwrun; use 'gpus:'"),
    ("    env: {DEBUG: yes}\n",
     "t.yaml:5:18: process 'a': env DEBUG: write the value in quotes ('true')"),
    ("    env: {1X: a}\n", "t.yaml:5:11: process 'a': env: '1X' is not a valid variable name"),
    ("    env: [A]\n", "t.yaml:5:10: process 'a': env must be a mapping, not a list"),
    ("    host: elsewhere\n", "t.yaml:5:11: process 'a': unknown host 'elsewhere'"),
    ("    replicas: 0\n", "t.yaml:5:15: process 'a': replicas must be at least 1, not 0"),
])
def test_process_errors_point_at_the_value(line, expected):
    assert one_problem(minimal(extra_process=line)).startswith(expected)


def test_cmd_errors():
    assert one_problem(minimal().replace("cmd: run a", "cmd: \"run 'a\"")).startswith(
        "t.yaml:4:10: process 'a': cmd cannot be split like a shell line: No closing quotation")
    assert one_problem(minimal().replace("cmd: run a", "cmd: []")) == \
        "t.yaml:4:10: process 'a': cmd is empty"
    assert one_problem(minimal().replace("cmd: run a", "cmd: [run, [x]]")) == \
        "t.yaml:4:16: process 'a': cmd item must be a string, not a list"
    assert one_problem(minimal().replace("    cmd: run a\n", "    restart: never\n")) == \
        "t.yaml:4:5: process 'a': 'cmd' is missing (the command to run)"


def test_explicit_devices_cannot_be_shared_by_replicas():
    text = ("processes:\n  w:\n    replicas: 2\n    cmd: x\n    gpus: [0]\n"
            "worlds:\n  all:\n    members: [w]\n")
    assert one_problem(text) == ("t.yaml:5:11: process 'w': explicit gpus cannot be shared"
                                 " by 2 replicas; give a count instead")


@pytest.mark.parametrize("world, expected", [
    ("    members: [a, ghost]\n", "t.yaml:7:18: world 'w2': unknown process 'ghost'"),
    ("    members: [a, a]\n", "t.yaml:7:18: world 'w2': 'a' is a member twice"),
    ("    members: a\n", "t.yaml:7:14: world 'w2': members must be a list, not a string"),
    ("    members: []\n", "t.yaml:7:14: world 'w2': members is empty"),
    ("    members: [a]\n    port: 70000\n",
     "t.yaml:8:11: world 'w2': port must be at most 65535, not 70000"),
    ("    members: [a]\n    on_failure: explode\n",
     "t.yaml:8:17: world 'w2': on_failure must be one of isolate | stop, not 'explode'"),
    ("    members: [a]\n    backend: nccl\n",
     "t.yaml:7:15: world 'w2': uses nccl but member 'a' has no GPU pinned"),
    ("    member: [a]\n", "t.yaml:7:5: world 'w2': unknown key 'member'; did you mean 'members'"),
    ("    members: [aa]\n", "t.yaml:7:15: world 'w2': unknown process 'aa'; did you mean 'a'?"),
    ("    members: [zebra]\n", "t.yaml:7:15: world 'w2': unknown process 'zebra'; processes"
                             " are a"),
])
def test_world_errors(world, expected):
    text = "processes:\n  a:\n    cmd: x\nworlds:\n  w1: {members: [a]}\n  w2:\n" + world
    found = problems(text)
    assert any(p.startswith(expected) for p in found), found


def test_an_unknown_member_is_matched_against_replicated_names_too():
    text = ("processes:\n  leader: {cmd: x}\n  worker: {cmd: y, replicas: 2}\n"
            "worlds:\n  w: {members: [leader, workers]}\n  v: {members: [worker, leder]}\n")
    assert problems(text) == [
        "t.yaml:5:25: world 'w': unknown process 'workers'; did you mean 'worker'?",
        "t.yaml:6:25: world 'v': unknown process 'leder'; did you mean 'leader'?"]


def test_nccl_with_pinned_gpu_is_fine():
    topo = parse("backend: nccl\nprocesses:\n  a:\n    cmd: x\n    gpus: 1\n"
                 "worlds:\n  w: {members: [a]}\n", "t.yaml")
    assert topo.worlds["w"].backend == "nccl"
    assert topo.processes["a"].gpus == 1


def test_process_in_no_world_is_reported_at_its_name():
    text = "processes:\n  a:\n    cmd: x\n  lonely:\n    cmd: y\nworlds:\n  w: {members: [a]}\n"
    assert one_problem(text) == ("t.yaml:4:3: process 'lonely' is in no world;"
                                 " add 'lonely' to a world's members")


def test_missing_sections_and_empty_file():
    assert one_problem("") == ("t.yaml:1:1: the file is empty; a topology needs at least"
                               " 'processes' and 'worlds'")
    assert problems("name: x\n") == [
        "t.yaml:1:1: 'processes' is missing: name at least one process and its cmd",
        "t.yaml:1:1: 'worlds' is missing: every process must belong to at least one world"]
    assert one_problem("- a\n- b\n") == "t.yaml:1:1: topology must be a mapping, not a list"


def test_yaml_syntax_error_has_position():
    assert one_problem("processes:\n  a: [1, 2\n") .startswith("t.yaml:3:1: YAML syntax error")


def test_duplicate_keys_are_reported():
    text = minimal().replace("  b:\n    cmd: run b\n", "  b:\n    cmd: run b\n  a:\n    cmd: z\n")
    assert one_problem(text) == ("t.yaml:7:3: processes: duplicate key 'a'"
                                 " (first given on line 3)")


def test_replica_name_clash():
    text = ("processes:\n  w-0:\n    cmd: x\n  w:\n    replicas: 1\n    cmd: y\n"
            "worlds:\n  all: {members: [w-0]}\n")
    assert one_problem(text) == ("t.yaml:4:3: process 'w-0' is defined twice (also at line 2)")


def test_all_errors_reported_at_once_in_file_order():
    text = ("version: 3\nprocesses:\n  a:\n    cmd: x\n    restart: often\n"
            "worlds:\n  w: {members: [a, ghost]}\n")
    found = problems(text)
    assert [f.split(":")[1] for f in found] == ["1", "5", "7"]


def test_hosts_section():
    text = ("hosts:\n  head: {addr: 10.0.0.1}\n  node: {addr: 10.0.0.2, gpus: 2, cpus: 4}\n"
            "processes:\n  a: {cmd: x, host: node}\nworlds:\n  w: {members: [a]}\n")
    topo = parse(text, "t.yaml")
    assert topo.hosts["node"].gpus == 2 and topo.hosts["node"].cpus == 4
    assert topo.processes["a"].host == "node"
    found = problems(text.replace(", host: node", ""))
    assert found == ["t.yaml:5:3: process 'a': 'host' is missing; there are several hosts"
                     " (head, node)"]
    assert problems(text.replace("{addr: 10.0.0.1}", "{ip: 10.0.0.1}")) == [
        "t.yaml:2:9: host 'head': 'addr' is missing (an IP address or host name)",
        "t.yaml:2:10: host 'head': unknown key 'ip'; known keys: addr, gpus, cpus, netns,"
        " ssh, ssh_options, python"]


def test_ssh_hosts_and_launcher():
    text = ("hosts:\n  head: {addr: 10.0.0.1}\n"
            "  node: {addr: 10.0.0.2, ssh: 'root@10.0.0.2:2222', ssh_options: [-i, k],"
            " python: /opt/venv/bin/python}\n"
            "processes:\n  a: {cmd: x, host: node}\n  b: {cmd: x, host: head}\n"
            "worlds:\n  w: {members: [a, b]}\n")
    topo = parse(text, "t.yaml")
    node = topo.hosts["node"]
    assert topo.launcher == "ssh" and node.remote and not topo.hosts["head"].remote
    assert (node.ssh, node.ssh_options, node.python) == ("root@10.0.0.2:2222", ("-i", "k"),
                                                          "/opt/venv/bin/python")
    assert problems(text.replace("'root@10.0.0.2:2222'", "'a b'")) == [
        "t.yaml:3:31: host 'node': ssh 'a b': write [user@]host[:port]"]
    assert problems(text.replace("[-i, k]", "-i k")) == [
        "t.yaml:3:66: host 'node': ssh_options must be a list, not a string"]
    assert problems("launcher: local\n" + text) == [
        "t.yaml:1:11: launcher: local with hosts that name 'ssh:'; use launcher: ssh, or"
        " leave 'ssh:' out"]
    slurm = "launcher: slurm\n" + text.replace("{addr: 10.0.0.1}", "{}").replace(
        "addr: 10.0.0.2, ssh: 'root@10.0.0.2:2222', ", "")
    topo = parse(slurm, "t.yaml")
    assert topo.launcher == "slurm" and all(h.remote for h in topo.hosts.values())


def test_parse_cpus():
    assert parse_cpus("0-3,6") == (0, 1, 2, 3, 6)
    assert parse_cpus("5") == (5,)
    with pytest.raises(ValueError, match="empty item"):
        parse_cpus("1,,2")


def test_load_checks_cwd_and_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(minimal(extra_process="    cwd: missing\n"))
    with pytest.raises(TopologyError) as info:
        load(path)
    assert str(info.value) == f"{path}:5:10: process 'a': cwd {tmp_path}/missing is not a folder"
    (tmp_path / "missing").mkdir()
    assert load(path).processes["a"].cwd == str(tmp_path / "missing")
