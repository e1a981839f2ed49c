"""mypy holds the whole package (``mwrun``, with pyproject.toml's settings): the typed
seams first of all (where the head meets a host, ``HostHands``: this host's ``Hands``
or the agents; where the hands tell their owner, ``Owner``; where the supervisor acts,
``supervisor.Host``, and what it tells, ``events``; the launch spec that crosses the
link; how a lost host is reached again, ``agents.Reach``: ssh or Slurm), and every
other module as far as it is annotated."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
# The three run on one worker with one cache: the first reads torch's and the package's
# types (the bulk of a run's 20 s), the other two only their own file.
pytestmark = pytest.mark.xdist_group("mypy")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("mypy") / "cache")


@pytest.mark.slow
@pytest.mark.timeout(600)  # 35 s of one core here; beside a full suite, minutes
def test_mypy_holds_the_whole_package(cache):
    """``mypy mwrun`` finds nothing: every module, not only the seams."""
    pytest.importorskip("mypy", reason="mypy comes with the test extras: pip install -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache,
                           "mwrun"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


TRANSPORTS = """\
from mwrun.head.hosts.agents import Reach
from mwrun.head.hosts.remote import SshReach
from mwrun.head.hosts.slurm import Steps


def ssh() -> Reach:
    return SshReach()


def slurm(steps: Steps) -> Reach:
    return steps
"""


def test_every_transport_reaches_a_lost_host_the_same_way(tmp_path, cache):
    """ssh and Slurm are both an ``agents.Reach``: the place a new transport plugs in."""
    pytest.importorskip("mypy", reason="mypy comes with the test extras")
    check = tmp_path / "transports.py"
    check.write_text(TRANSPORTS)
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache,
                           str(check)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_sees_a_broken_seam(tmp_path, cache):
    """The check is no formality: a host without ``start`` is refused."""
    pytest.importorskip("mypy", reason="mypy comes with the test extras")
    bad = tmp_path / "bad.py"
    bad.write_text("from mwrun.head.hosts.router import HostHands\n\n"
                   "class NoStart:\n"
                   "    def prepare(self, spec) -> None: ...\n\n"
                   "hands: HostHands = NoStart()\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache,
                           str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "HostHands" in done.stdout, done.stdout
