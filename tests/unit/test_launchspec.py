"""A launch spec: one builder of a process's environment, the same on every host, and a
shape checked when it arrives over the link."""

import pytest

from mwrun.launchspec import LaunchSpec, SpecError
from mwrun.plan import environment
from tests.unit.test_placement import STAR, plan_of


def spec(**over):
    fields = {"name": "w", "argv": ("python", "w.py"), "cwd": "/", "env": {"RANK": "1"},
              "unset": ("RANK", "MASTER_ADDR"), "unset_prefixes": ("TORCHELASTIC_",),
              "prepend": {"PYTHONWARNINGS": "ignore:x"}}
    return LaunchSpec(**{**fields, **over})


def test_the_hosts_own_environment_under_mwruns_names():
    host = {"PATH": "/host/bin", "RANK": "7", "MASTER_ADDR": "outer", "TORCHELASTIC_X": "1",
            "PYTHONWARNINGS": "default"}
    env = spec().environ(host)
    assert env == {"PATH": "/host/bin", "RANK": "1", "PYTHONWARNINGS": "ignore:x,default"}


def test_a_users_own_warning_setting_comes_after_ours():
    env = spec(env={"PYTHONWARNINGS": "error"}).environ({})
    assert env["PYTHONWARNINGS"] == "ignore:x,error"


def test_a_spec_survives_the_link():
    sent = spec(cpus=(0, 2), preload=("torch",), warm=("script", "w.py", ("--n", "2")))
    assert LaunchSpec.from_fields(sent.to_fields()) == sent


@pytest.mark.parametrize("broken", [
    {"argv": "python w.py"}, {"argv": []}, {"env": {"A": 1}}, {"cpus": ["0"]},
    {"cpus": [True]}, {"warm": ["script"]}, {"name": None}, {"env": ["A"]}])
def test_a_malformed_spec_is_refused_with_a_reason(broken):
    fields = {**spec().to_fields(), **broken}
    with pytest.raises(SpecError, match="malformed launch spec"):
        LaunchSpec.from_fields(fields)


def test_the_plan_decides_once_how_a_process_starts_warm():
    plan = plan_of(STAR + "preload: [torch]\n", python="/venv/bin/python")
    built = environment.launch_spec(plan, "leader", run_id="r", control="/c.sock")
    assert built.warm == ("script", "leader.py", ()) and built.preload == ("torch",)
    assert built.argv == ("/venv/bin/python", "leader.py") and built.cpus == (0, 1)


def test_the_head_and_an_agent_build_the_same_environment():
    """Locally the head lays the spec over its own environment, an agent over its
    host's: from the same inherited variables, the same result as process_env."""
    plan = plan_of(STAR, python="/venv/bin/python")
    inherited = {"PATH": "/bin", "RANK": "9", "TORCHELASTIC_RUN_ID": "outer"}
    kwargs = {"run_id": "r", "control": "/c.sock", "generations": {}, "restart_count": 0}
    sent = environment.launch_spec(plan, "leader", **kwargs)
    arrived = LaunchSpec.from_fields(sent.to_fields())
    assert arrived.environ(inherited) == environment.process_env(plan, "leader", inherited,
                                                                 **kwargs)
    assert arrived.environ(inherited)["RANK"] == "0"
    assert arrived.environ(inherited)["TORCHELASTIC_RUN_ID"] == "r"
