"""The seams are typed, and mypy holds them: where the head meets a host (``HostHands``:
this host's ``Hands`` or the agents), where the hands tell their owner (``Owner``: the
head's loop or an agent), where the supervisor acts (``supervisor.Host``: the loop) and
what it tells (``events``), the launch spec that crosses the link, how a lost host is
reached again (``agents.Reach``: ssh or Slurm), and where the parts of the agents meet
(the links and the remote processes on the head, the relay and the link on a host)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SEAMS = ["mwrun/launchspec.py", "mwrun/host/hands.py", "mwrun/host/agent.py",
         "mwrun/host/relay.py", "mwrun/head/loop.py", "mwrun/head/agents.py",
         "mwrun/head/links.py", "mwrun/head/remotebook.py", "mwrun/head/events.py",
         "mwrun/head/supervisor.py", "mwrun/head/router.py", "mwrun/head/reshaping.py",
         "mwrun/head/control.py", "mwrun/membership/revision.py"]


def test_mypy_holds_the_seams(tmp_path):
    pytest.importorskip("mypy", reason="mypy comes with the test extras: pip install -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           *SEAMS], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


TRANSPORTS = """\
from mwrun.head.agents import Reach
from mwrun.head.remote import SshReach
from mwrun.head.slurm import Steps


def ssh() -> Reach:
    return SshReach()


def slurm(steps: Steps) -> Reach:
    return steps
"""


def test_every_transport_reaches_a_lost_host_the_same_way(tmp_path):
    """ssh and Slurm are both an ``agents.Reach``: the place a new transport plugs in."""
    pytest.importorskip("mypy", reason="mypy comes with the test extras")
    check = tmp_path / "transports.py"
    check.write_text(TRANSPORTS)
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           str(check)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_sees_a_broken_seam(tmp_path):
    """The check is no formality: a host without ``start`` is refused."""
    pytest.importorskip("mypy", reason="mypy comes with the test extras")
    bad = tmp_path / "bad.py"
    bad.write_text("from mwrun.head.router import HostHands\n\n"
                   "class NoStart:\n"
                   "    def prepare(self, spec) -> None: ...\n\n"
                   "hands: HostHands = NoStart()\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "HostHands" in done.stdout, done.stdout
