"""Numbers of seconds a topology may hold (finite, at most a year, 1e10 read as a
number) and addresses a host reached through an agent can use (never a loopback of
another machine): refused at validate, with the position, never at run time."""

import pytest
from click.testing import CliRunner

from mwrun.cli.commands import main
from mwrun.plan.topology import parse
from tests.unit.test_topology import problems

JOB = "processes:\n  a: {cmd: x}\n  b: {cmd: y}\nworlds:\n  w: {members: [a, b]}\n"


@pytest.mark.parametrize("text, found", [
    ("timeout: .inf\n" + JOB, "t.yaml:1:10: timeout must be a finite number of seconds"),
    ("timeout: .nan\n" + JOB, "t.yaml:1:10: timeout must be a number"),
    ("timeout: 1.0e+10\n" + JOB, "t.yaml:1:10: timeout: 1e+10 seconds is more than a year"),
    ("timeout: 1e10\n" + JOB, "t.yaml:1:10: timeout: 1e+10 seconds is more than a year"),
    (JOB.replace("[a, b]}", "[a, b], timeout: 1.0e+14}"),
     "t.yaml:5:33: world 'w': timeout: 1e+14 seconds is more than a year"),
    ("hang_timeout: 1e10\n" + JOB, "t.yaml:1:15: hang_timeout: 1e+10 seconds is more than"),
    (JOB.replace("{cmd: x}", "{cmd: x, restart_backoff: .inf}"),
     "t.yaml:2:32: process 'a': restart_backoff must be a finite number of seconds"),
])
def test_a_timeout_beyond_what_torch_takes_is_a_positioned_error(text, found):
    [said] = problems(text)
    assert said.startswith(found), said


@pytest.mark.parametrize("written, seconds", [("1e1", 10.0), ("2.5E+2", 250.0),
                                              ("31536000", 31536000.0)])
def test_yaml_1_2_exponents_are_numbers_and_a_year_is_taken(written, seconds):
    assert parse(f"timeout: {written}\nhang_timeout: .inf\n" + JOB, "t.yaml").timeout == seconds


def test_a_quoted_exponent_is_still_a_string():
    [said] = problems("timeout: '1e1'\n" + JOB)
    assert said == "t.yaml:1:10: timeout must be a number, not a string"


def test_hang_timeout_inf_still_turns_hang_detection_off():
    assert parse("hang_timeout: .inf\n" + JOB, "t.yaml").hang_deadline("a") == float("inf")
    assert parse(JOB.replace("{cmd: x}", "{cmd: x, hang_timeout: .inf}"),
                 "t.yaml").hang_deadline("a") == float("inf")


def test_validate_refuses_an_endless_timeout(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("timeout: .inf\n" + JOB)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "timeout must be a finite number of seconds" in result.output
    assert "Traceback" not in result.output


HOSTS = ("hosts:\n  head: {addr: HEAD}\n  node1: {addr: NODE, ssh: 10.0.0.2}\n"
         "processes:\n  a: {cmd: x, host: head}\n  b: {cmd: y, host: node1}\n"
         "  c: {cmd: z, host: node1}\n")


def hosts(head="10.0.0.1", node="10.0.0.2", worlds="  w: {members: [a, b, c]}\n"):
    return HOSTS.replace("HEAD", head).replace("NODE", node) + "worlds:\n" + worlds


@pytest.mark.parametrize("head", ["127.0.0.1", "127.0.1.1", "localhost", "'::1'"])
def test_a_loopback_head_with_members_on_an_ssh_host_is_refused_at_its_addr(head):
    [said] = problems(hosts(head))
    assert said.startswith(f"t.yaml:2:16: host 'head': addr {head.strip(chr(39))} is a"
                           " loopback address, but world 'w' has members on host 'node1',"
                           " which would take it for its own machine"), said


def test_a_world_wholly_on_an_ssh_host_still_needs_the_heads_store_address():
    [said] = problems(hosts("127.0.0.1", worlds="  w: {members: [a]}\n  v: {members: [b, c]}\n"))
    assert said.startswith("t.yaml:2:16: host 'head': addr 127.0.0.1 is a loopback"
                           " address, but world 'v' has members on host 'node1'"), said


def test_a_loopback_address_for_an_ssh_host_is_refused_too():
    [said] = problems(hosts(node="127.0.0.1"))
    assert said.startswith("t.yaml:3:17: host 'node1': addr 127.0.0.1 is a loopback"), said


def test_loopbacks_on_this_machine_alone_are_fine():
    text = ("hosts:\n  h1: {addr: 127.0.0.1}\n  h2: {addr: 127.0.0.2}\nprocesses:\n"
            "  a: {cmd: x, host: h1}\n  b: {cmd: y, host: h2}\nworlds:\n  w: {members: [a, b]}\n")
    assert set(parse(text, "t.yaml").hosts) == {"h1", "h2"}
    assert parse(hosts(), "t.yaml").hosts["head"].addr == "10.0.0.1"


def test_validate_refuses_a_loopback_head_for_an_ssh_job(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(hosts("127.0.0.1"))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "addr 127.0.0.1 is a loopback address" in result.output
