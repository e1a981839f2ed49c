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
