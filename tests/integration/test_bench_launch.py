"""The benches stop at once, in the launch's own words, when their job does not start
(bench/common.py), and bench/scale.py's simulated job runs: its head on this machine's
own address, its hosts stand-ins reached through the bench's stand-in ssh (no sshd)."""

import subprocess
import sys

import pytest

from bench.common import Launched, NotStarted
from bench.compare_torchrun import Job
from tests.helpers import ROOT

REFUSED = """\
version: 1
hosts:
  head: {addr: 127.0.0.1}
  node1: {addr: 10.0.0.2, ssh: node1}
processes:
  a: {cmd: [python, x.py], host: head}
  b: {cmd: [python, x.py], host: node1}
worlds:
  w: {members: [a, b]}
"""


FAILS = """\
version: 1
processes:
  a: {cmd: [PY, -c, "raise SystemExit(3)"], restart: never}
  b: {cmd: [PY, -c, "import time; time.sleep(600)"]}
worlds:
  w: {members: [a, b]}
"""


def test_a_refused_launch_ends_the_wait_for_health_with_its_own_error(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(REFUSED)
    job = Launched(path, tmp_path / "home")
    with pytest.raises(NotStarted) as raised:
        job.healthy(600)  # the test's own timeout is far shorter: it must not be waited
    said = str(raised.value)
    assert said.startswith("every world of the job in"), said
    assert "never, mwrun launch exited with status 2" in said, said
    assert "host 'head': addr 127.0.0.1 is a loopback address" in said, said


def test_a_refused_launch_ends_the_wait_for_a_line_too(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(REFUSED)
    job = Launched(path, tmp_path / "home")
    with pytest.raises(NotStarted, match=r"(?s)no 'ready' from a: mwrun launch exited with"
                                         r" status 2.*is a loopback address"):
        job.expect("a", "ready", 600)
    with pytest.raises(NotStarted, match="exited with status 2"):  # and every wait after
        job.expect("a", "ready", 600)


def test_a_job_whose_process_fails_before_its_world_forms_ends_the_wait(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(FAILS.replace("PY", sys.executable))
    job = Launched(path, tmp_path / "home", "--grace", "1")
    try:
        with pytest.raises(NotStarted) as raised:
            job.healthy(600)
    finally:
        job.stop()
    said = str(raised.value)
    assert "never, " in said and "not seen" not in said, said
    assert "world w is closed: a exited with code 3; not restarted" in said, said


def test_a_launcher_that_exits_ends_a_wait_on_its_lines_with_its_words(tmp_path):
    job = Job([sys.executable, "-c", "print('refused: no such thing'); raise SystemExit(4)"],
              {})
    with pytest.raises(NotStarted) as raised:
        job.require(lambda: False, 600, "every rank started")
    said = str(raised.value)
    assert said.startswith("every rank started: never, python"), said
    assert "exited with status 4" in said and "refused: no such thing" in said, said


@pytest.mark.slow
@pytest.mark.timeout(300)  # two imports of torch and a job of 18 processes, on a loaded machine
def test_the_simulated_job_of_the_scale_bench_comes_up_and_is_measured():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--only", "sim",
                           "--hosts", "2", "--watch", "0.5", "--kills", "1"],
                          capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[this] 16 ranks on 2 simulated hosts:" in done.stdout, done.stdout
    assert "exit frame -> break in the store" in done.stdout, done.stdout
    assert "never" not in done.stdout, done.stdout
