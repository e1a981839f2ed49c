"""The benches stop at once, in the launch's own words, when their job does not start
(bench/common.py), and bench/scale.py's simulated job runs: its head on a bridge the
bench makes for it (10.232.N.1, the test bed's scheme) and removes when it ends, also
on failure; its hosts stand-ins reached through the bench's stand-in ssh (no sshd)."""

import subprocess
import sys
from pathlib import Path

import pytest

from bench import scale
from bench.common import Launched, NotStarted
from bench.compare_torchrun import Job
from mwrun.plan.topology import parse
from tests.integration import testbed

NEEDS_LINK = pytest.mark.skipif(testbed.missing_link() is not None,
                                reason=testbed.missing_link() or "")

# Refused before anything starts (a world names a process the file does not have): no
# host, no address, nothing is ever reached.
REFUSED = """\
version: 1
processes:
  a: {cmd: [python, x.py]}
worlds:
  w: {members: [a, ghost]}
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
    assert "ghost" in said, said


def test_a_refused_launch_ends_the_wait_for_a_line_too(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(REFUSED)
    job = Launched(path, tmp_path / "home")
    with pytest.raises(NotStarted, match=r"(?s)no 'ready' from a: mwrun launch exited with"
                                         r" status 2.*unknown process 'ghost'"):
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


Seen = list[tuple[str, dict[str, int]]]  # a launch's head address, its links' indexes


def ifindex(name: str) -> int | None:
    """A link's index, None once it is gone: a link made later under the same name
    (another test bed that took the same /24 since) has another."""
    try:
        return int(Path(f"/sys/class/net/{name}/ifindex").read_text())
    except OSError:
        return None


def head_links(topology: Path) -> tuple[str, dict[str, int]]:
    """The job's head address and the links that have it, by index, looked at as it
    launches (its run is within the link's life)."""
    head = parse(topology.read_text(), str(topology)).hosts["head"].addr
    return head, {n: i for n in testbed.links_with(head) if (i := ifindex(n)) is not None}


def leaked(seen: Seen) -> list[str]:
    """The links seen at a launch that are there still: the bench left them."""
    return [n for _, links in seen for n, i in links.items() if ifindex(n) == i]


def remove_leaked(seen: Seen) -> None:
    """The links the bench made and left (the leak check has looked before): only
    those, never another test bed's."""
    for name in leaked(seen):
        subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=30)


@NEEDS_LINK
@pytest.mark.slow
@pytest.mark.timeout(300)  # an import of torch and a job of 18 processes, on a loaded machine
def test_the_simulated_job_of_the_scale_bench_comes_up_on_a_link_of_its_own(monkeypatch,
                                                                            capsys):
    seen: Seen = []

    def watched(topology: Path, *args, **kwargs) -> Launched:
        seen.append(head_links(topology))
        return Launched(topology, *args, **kwargs)

    monkeypatch.setattr(scale, "Launched", watched)
    monkeypatch.setattr(sys, "argv", ["scale.py", "--only", "sim", "--hosts", "2",
                                      "--watch", "0.5", "--kills", "1"])
    try:
        scale.main()
        out = capsys.readouterr().out
        assert "[this] 16 ranks on 2 simulated hosts:" in out, out
        assert "exit frame -> break in the store" in out, out
        assert "never" not in out, out
        [(head, during)] = seen
        number = int(head.split(".")[2])
        assert head == f"10.232.{number}.1" and list(during) == [f"mwt{number}"], seen
        assert f"sim: the head on {head}, link mwt{number}, made for this run" in out, out
        assert leaked(seen) == [], "the sim's link outlived the bench"
    finally:
        remove_leaked(seen)


class Refused(Exception):
    pass


@NEEDS_LINK
def test_the_sims_link_is_removed_when_its_job_fails(monkeypatch, tmp_path):
    seen: Seen = []

    def fails(topology: Path, *args, **kwargs):
        seen.append(head_links(topology))
        raise Refused("the launch failed")

    monkeypatch.setattr(scale, "Launched", fails)
    try:
        with pytest.raises(Refused):
            scale.simulated(tmp_path, 2, 0.5, 1, None)
        [(head, during)] = seen
        assert head.startswith("10.232.") and len(during) == 1, seen
        assert leaked(seen) == [], "the sim's link outlived its failed job"
    finally:
        remove_leaked(seen)
