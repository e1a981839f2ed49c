"""What ``mwrun adopt`` reads of the run folder before it touches anything
(head/adopting.py): where every agent is; a run folder that does not say is refused."""

import json

import pytest

from mwrun.errors import RunError
from mwrun.head import adopting
from mwrun.plan import topology

SLURM = """\
version: 1
name: s
launcher: slurm
head_grace: 60
hosts:
  first: {}
  second: {}
processes:
  a: {cmd: [python, a.py], host: first}
  b: {cmd: [python, b.py], host: second}
worlds:
  w: {members: [a, b]}
"""


def folder(tmp_path, agents: dict):
    (tmp_path / "topology.yaml").write_text(SLURM)
    (tmp_path / "agents.json").write_text(json.dumps(agents))
    return tmp_path


def hosts(tmp_path) -> dict:
    return topology.load(str(tmp_path / "topology.yaml")).hosts


def test_under_slurm_each_agent_is_found_by_its_node_and_job(tmp_path):
    agents = {"first": {"control": "/s/1.sock", "pid": 1, "node": "n1", "jobid": "9"},
              "second": {"control": "/s/2.sock", "pid": 2, "node": "n2", "jobid": "9"}}
    assert adopting._agents(folder(tmp_path, agents), hosts(tmp_path)) == agents


def test_a_run_folder_that_does_not_say_where_an_agent_is_is_refused(tmp_path):
    agents = {"first": {"control": "/s/1.sock", "pid": 1, "node": "n1", "jobid": "9"},
              "second": {"control": "/s/2.sock", "pid": 2}}  # (an older mwrun's)
    with pytest.raises(RunError, match=r"where the agents of second are.*nothing was"
                                       r" touched"):
        adopting._agents(folder(tmp_path, agents), hosts(tmp_path))
    (tmp_path / "agents.json").write_text("[1, 2")
    with pytest.raises(RunError, match="cannot be read"):
        adopting._agents(tmp_path, hosts(tmp_path))
