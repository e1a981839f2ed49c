"""What a preloaded module did at import holds in the warm process as in a cold one:
the files it opened, its signal handlers, its random generators; and which processes
share a zygote."""

import sys

import pytest

from tests.helpers import ROOT
from tests.integration.jobs import cli, launch
from tests.integration.test_warm import finish, write

pytestmark = pytest.mark.timeout(180)
PY = sys.executable


def test_a_file_a_preloaded_module_opened_stays_its_own(procs, home, tmp_path):
    # logging.basicConfig(filename=...) at import: the warm child's log lines go to
    # that file, not into whatever socket the library opens next.
    lines = 5000
    cmd = [PY, str(ROOT / "tests" / "bin" / "chatty.py"), "--lines", str(lines)]
    logs = {name: tmp_path / f"{name}.log" for name in ("warm", "cold")}
    topology = write(tmp_path, {
        name: (cmd, [f"env: {{PYTHONPATH: {ROOT}, PRELOAD_LOG: {path}}}"]
               + (["preload: false"] if name == "cold" else []))
        for name, path in logs.items()}, preload="[tests.bin.preloads.logfile]")
    job = launch(procs, home, topology)
    doc = finish(job, home)
    assert {p["name"]: p["start"] for p in doc["processes"]} == {"warm": "warm", "cold": "cold"}
    last = f"line {lines - 1} of a chatty logger, padded to make it long enough to fill buffers"
    for name, path in logs.items():
        text = path.read_text().splitlines()
        assert len(text) == lines and text[-1].endswith(last), name
        assert f"logged {lines}" in cli(home, "logs", name, doc["run_id"], check=True).stdout
