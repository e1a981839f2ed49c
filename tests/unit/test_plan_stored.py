"""A plan as the run folder keeps it (plan.json) comes back as the same plan: what a
detached head is handed, and what a head that takes a run over loads."""

import json
from pathlib import Path

import pytest

from mwrun.errors import RunError
from mwrun.plan import stored
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
from mwrun.schema import Start
from tests.unit.test_placement import HERE, ports_from

ROOT = Path(__file__).resolve().parents[2]


def plan_of(path: Path):
    topo = parse(path.read_text(), str(path), str(path.parent))
    return place(topo, {name: HERE for name in topo.hosts}, ports_from(40000), "python3")


def through_json(plan):
    return stored.load(json.loads(json.dumps(stored.dump(plan))))


@pytest.mark.parametrize("config", sorted((ROOT / "configs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_shipped_topology_comes_back_as_the_same_plan(config):
    plan = plan_of(config)
    again = through_json(plan)
    assert again == plan
    assert isinstance(next(iter(again.processes.values())).start, Start)
    assert all(isinstance(p.cmd, tuple) for p in again.processes.values())


def test_a_field_that_does_not_fit_is_named(tmp_path):
    data = stored.dump(plan_of(ROOT / "configs" / "star.yaml"))
    data["worlds"]["world1"]["port"] = "29500"
    with pytest.raises(RunError, match=r"plan.json.worlds.world1.port: '29500' is not int"):
        stored.load(data)
    data = stored.dump(plan_of(ROOT / "configs" / "star.yaml"))
    data["processes"]["leader"]["restart_backoff"] = True  # a bool is never a number
    with pytest.raises(RunError, match=r"restart_backoff: True is not float"):
        stored.load(data)


def test_a_field_unknown_or_missing_is_refused():
    data = stored.dump(plan_of(ROOT / "configs" / "star.yaml"))
    data["processes"]["leader"]["colour"] = "red"
    with pytest.raises(RunError, match=r"processes.leader: unknown field 'colour'"):
        stored.load(data)
    data = stored.dump(plan_of(ROOT / "configs" / "star.yaml"))
    del data["worlds"]["world1"]["members"]
    with pytest.raises(RunError, match=r"worlds.world1: 'members' is missing"):
        stored.load(data)
    with pytest.raises(RunError, match=r"plan.json: \[\] is not an object"):
        stored.load([])
