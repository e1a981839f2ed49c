"""README's "A fault drill", command by command, against the demo (configs/star.yaml).

The commands are read from README.rst itself, so the text and this test stay in step:
each is run as written (``mwrun ...`` with the run's MWRUN_HOME, no run id, as a user
in a second terminal types it), and what README says of it is checked.

The star runs from a copy of configs/star.yaml that differs in three values only:
``cwd`` (the repository, wherever the copy lies) and the timeouts, ``timeout: 4`` and
``hang_timeout: 6`` instead of 30 and 30, so that the STOP drill's hang is declared in
seconds rather than half a minute (the chain ``timeout < hang_timeout`` must hold).
"""

import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys

import pytest

from tests.helpers import ROOT, wait_gone
from tests.integration.jobs import launch, proc_state, wait_status, world_state

pytestmark = pytest.mark.timeout(240)


def drill_commands() -> list[str]:
    """Every ``mwrun`` command of README's "A fault drill", in the order written, up to
    its chaos loop ("A chaos drill ...", ``mwrun drill``: tests/integration/test_drill.py)."""
    text = (ROOT / "README.rst").read_text()
    section = text.split("A fault drill\n-------------\n")[1].split("\n\nmwrun and torchrun")[0]
    section = section.split("\n\nA chaos drill")[0]
    found = []
    for paragraph in section.split("\n\n"):
        if paragraph.startswith("    mwrun "):  # a literal block: one command a line
            found += [line.split("  #")[0].strip() for line in paragraph.splitlines()]
        else:
            found += re.findall(r"``(mwrun [^`]+)``", " ".join(paragraph.split()))
    return [command for command in found if not command.startswith("mwrun drill")]


def star_copy(tmp_path) -> str:
    text = (ROOT / "configs" / "star.yaml").read_text()
    # Only the folder and the two clocks differ (the chain: call timeout < hang_timeout).
    for key, new in (("cwd", str(ROOT)), ("timeout", "4"), ("hang_timeout", "6")):
        text, found = re.subn(rf"^(\s*{key}: )\S+", rf"\g<1>{new}", text, flags=re.M)
        assert found, key
    path = tmp_path / "star.yaml"
    path.write_text(text)
    return str(path)


def mwrun(home, command: str, cwd) -> subprocess.CompletedProcess:
    args = shlex.split(command)
    assert args[0] == "mwrun"
    return subprocess.run([sys.executable, "-m", "mwrun", *args[1:]], capture_output=True,
                          text=True, env=_env(home), cwd=cwd, timeout=120)


def _env(home) -> dict:
    return {**os.environ, "MWRUN_HOME": str(home), "NO_COLOR": "1"}


def watch_frame(home, command: str) -> str:
    """``status --watch`` runs until stopped: read a frame up to its last world (a
    plain frame, since its output is a pipe), then stop it."""
    args = shlex.split(command)
    proc = subprocess.Popen([sys.executable, "-m", "mwrun", *args[1:]], env=_env(home),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("world2 "):  # its worlds' table, after the processes'
                break
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        proc.stdout.close()
    return "".join(seen)


def test_readme_drill_commands_as_written(procs, home, tmp_path):
    commands = drill_commands()
    assert commands == ["mwrun status --watch", "mwrun kill-world world1",
                        "mwrun kill-world world1 --signal STOP", "mwrun report -o drill.png"]
    watch, kill, stop_drill, report = commands
    job = launch(procs, home, star_copy(tmp_path))
    job.expect(lambda line: "every world formed" in str(line), 120)
    wait_status(home, lambda d: all(w["state"] == "healthy" for w in d["worlds"]),
                "both worlds healthy", timeout=120)

    frame = watch_frame(home, watch)
    rows = [line.split() for line in frame.splitlines() if line.startswith("world")]
    assert [(row[0], "healthy" in row) for row in rows] == [("world1", True), ("world2", True)], \
        frame

    done = mwrun(home, kill, tmp_path)
    assert done.returncode == 0 and "sent SIGKILL to worker-0" in done.stdout, done
    job.expect(lambda line: line == "leader   | world1 broke: worker-0 was killed by SIGKILL")
    job.expect(lambda line: line == "leader   | world1 re-formed (generation 1)", 120)
    job.expect(lambda line: "from rank 1 in world1" in str(line))  # the restarted worker

    done = mwrun(home, stop_drill, tmp_path)
    assert done.returncode == 0 and "sent SIGSTOP to worker-0" in done.stdout, done
    doc = wait_status(home, lambda d: proc_state(d, "worker-0")["state"] == "unresponsive",
                      "worker-0 unresponsive")
    assert proc_state(doc, "worker-0")["restarts"] == 1  # shown before any verdict
    job.expect(lambda line: str(line).startswith("mwrun    | worker-0 hung: stopped"), 60)
    doc = wait_status(home, lambda d: proc_state(d, "worker-0")["restarts"] == 2
                      and world_state(d, "world1")["state"] == "healthy",
                      "worker-0 restarted and world1 re-formed", timeout=120)
    assert world_state(doc, "world1")["generation"] >= 2
    assert world_state(doc, "world2")["breaks"] == 0  # the other world never noticed
    assert doc["state"] == "running"  # the demo still runs
    job.expect(lambda line: "from rank 1 in world2" in str(line))

    job.signal(signal.SIGINT)  # "Ctrl-C in the first terminal stops the job cleanly"
    assert job.wait(timeout=60) == 0, job.output()
    wait_gone(home)  # "and leaves nothing behind"

    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed (pip install 'mwrun[report]'): the report"
                    " step was not run")
    done = mwrun(home, report, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "drill.png").stat().st_size > 0
    assert "world1" in done.stdout
