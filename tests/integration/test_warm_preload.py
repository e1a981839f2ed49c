"""What a preloaded module did at import holds in the warm process as in a cold one:
the files it opened, its signal handlers, its random generators; and which processes
share a zygote."""

import json
import os
import re
import signal
import sys

import pytest

from tests.helpers import ROOT, assert_gone
from tests.integration.jobs import cli, launch, wait_for
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


def test_a_child_forked_as_its_supervisor_is_killed_does_not_outlive_it(procs, home, tmp_path):
    # Its supervisor on the host (the agent of the head's machine) SIGKILLed after its
    # child left the zygote's group and before its watchdog heard of it: the child must
    # die with it all the same, not live on under init. The preloaded module holds the
    # child in that window until told to go.
    mark = tmp_path / "setsid"
    idle = tmp_path / "idle.py"
    idle.write_text("import time\nprint('running', flush=True)\ntime.sleep(120)\n")
    topology = write(tmp_path, {"worker": (
        [PY, str(idle)], [f"env: {{PYTHONPATH: {ROOT}, SETSID_MARK: {mark}}}"])},
        preload="[tests.bin.preloads.slow_setsid]")
    job = launch(procs, home, topology)
    (held,) = wait_for(lambda: [p for p in tmp_path.iterdir()
                                if p.name.startswith("setsid.") and p.name[7:].isdigit()],
                       timeout=60, what="a forked child in its own session")
    child, supervisor = map(int, held.read_text().split())
    os.kill(supervisor, signal.SIGKILL)
    (tmp_path / "setsid.go").touch()
    assert_gone([child])
    job.signal(signal.SIGTERM)  # the head reached its host again: the run ends now
    job.wait(60)


def test_the_interpreter_under_another_name_starts_warm(procs, home, tmp_path):
    twin = os.path.join(os.path.dirname(PY), "python3" if PY.endswith("/python") else "python")
    if not (os.path.exists(twin) and os.path.samefile(twin, PY)):
        pytest.skip(f"no {twin} beside {PY}")
    script = tmp_path / "exe.py"
    script.write_text("import sys\nprint('executable', sys.executable, flush=True)\n")
    job = launch(procs, home, write(tmp_path, {
        "warm": ([twin, str(script)], []), "cold": ([twin, str(script)], ["preload: false"])}))
    doc = finish(job, home)
    assert {p["name"]: p["start"] for p in doc["processes"]} == {"warm": "warm", "cold": "cold"}
    for name in ("warm", "cold"):  # the path it was started by, as a fresh one has it
        assert f"executable {twin}" in cli(home, "logs", name, doc["run_id"], check=True).stdout


def test_what_a_preloaded_module_set_up_at_import_is_as_in_a_fresh_process(procs, home,
                                                                            tmp_path):
    cmd = [PY, str(ROOT / "tests" / "bin" / "imprints.py")]
    path = f"env: {{PYTHONPATH: {ROOT}}}"
    job = launch(procs, home, write(tmp_path, {
        "warm-0": (cmd, [path]), "warm-1": (cmd, [path]),
        "cold": (cmd, [path, "preload: false"])}, preload="[tests.bin.preloads.imprint]"))
    doc = finish(job, home)
    assert {p["name"]: p["start"] for p in doc["processes"]} == {
        "warm-0": "warm", "warm-1": "warm", "cold": "cold"}
    said = {name: json.loads(cli(home, "logs", name, doc["run_id"], check=True
                                 ).stdout.strip().splitlines()[-1])
            for name in ("warm-0", "warm-1", "cold")}
    assert len({s["from_os"] for s in said.values()}) == 3  # each its own draw
    assert len({s["global"] for s in said.values()}) == 3
    assert len({s["on_purpose"] for s in said.values()}) == 1  # seeded: alike everywhere
    assert all(s["handler"] for s in said.values()), said  # its SIGTERM handler holds


def test_processes_whose_env_differs_only_where_imports_do_not_look_share_a_zygote(
        procs, home, tmp_path):
    cmd = [PY, str(ROOT / "tests" / "bin" / "flavours.py")]
    path = f"PYTHONPATH: {ROOT}"
    job = launch(procs, home, write(tmp_path, {
        "a": (cmd, [f"env: {{{path}, OTHER: a}}"]),
        "b": (cmd, [f"env: {{{path}, OTHER: b}}"]),
        # FLAVOUR is read at import: this one's imports must see its own.
        "c": (cmd, [f"env: {{{path}, OTHER: c, FLAVOUR: spicy}}"]),
    }, preload="[tests.bin.preloads.flavour]"))
    doc = finish(job, home)
    assert {p["name"]: p["start"] for p in doc["processes"]} == {
        "a": "warm", "b": "warm", "c": "warm"}
    said = {name: json.loads(cli(home, "logs", name, doc["run_id"], check=True
                                 ).stdout.strip().splitlines()[-1]) for name in "abc"}
    zygotes = {name: said[name].pop("imported_by") for name in "abc"}
    assert said == {"a": {"at_import": "plain", "flavour": None, "other": "a"},
                    "b": {"at_import": "plain", "flavour": None, "other": "b"},
                    "c": {"at_import": "spicy", "flavour": "spicy", "other": "c"}}
    assert zygotes["a"] == zygotes["b"] != zygotes["c"]  # a and b share one; c has its own
    # Each zygote was started once and said so once: the one launch starts first thing
    # (a and b's) is the one its loop forks from, not a second started beside it.
    events = (home / "runs" / doc["run_id"] / "events.log").read_text()
    started = re.findall(r"zygote \(pid (\d+)\) importing", events)
    assert sorted(map(int, started)) == sorted({zygotes["a"], zygotes["c"]}), events


def test_a_zygote_whose_imports_never_end_sends_its_starts_cold(tmp_path, monkeypatch):
    import selectors
    import time

    from mwrun.host import warm, warmstarts

    monkeypatch.setattr(warm, "READY_TIMEOUT", 1.0)
    monkeypatch.setattr(warm, "become_subreaper", lambda: True)  # not this test process
    (tmp_path / "forever.py").write_text("import time\ntime.sleep(3600)\n")
    (tmp_path / "job.py").write_text("")
    said, resumed = [], []
    starts = warmstarts.WarmStarts(tmp_path / "zygote.log", selectors.DefaultSelector(),
                                   said.append, lambda message: None, lambda: False)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    try:
        assert starts.start([PY, "job.py"], ["forever"], ("script", "job.py", ()), env,
                            str(tmp_path), None, resumed.append)
        deadline = time.monotonic() + 60
        while not resumed and time.monotonic() < deadline:
            starts.tick()
            time.sleep(0.05)  # the clock the timeout is read on; nothing to wait on here
        assert resumed == [None]  # its turn came: cold, not waited for for ever
        assert any("did not finish within 1s" in text for text in said), said
    finally:
        pids = starts.pids()
        starts.close(time.monotonic() + 5)
        assert_gone(list(pids))


def test_a_child_that_ends_before_its_fork_is_answered_keeps_its_exit_code(procs, home,
                                                                            tmp_path):
    # Its exit must be read by its own handle once the answer comes, never reaped
    # meanwhile as an orphan (it then read as code 255, "not ours to wait for").
    script = tmp_path / "quick.py"
    script.write_text("import sys\nsys.exit(int(sys.argv[1]))\n")
    quick = [PY, str(script)]
    path = f"env: {{PYTHONPATH: {ROOT}}}"
    job = launch(procs, home, write(tmp_path, {
        "zero": ([*quick, "0"], [path]), "three": ([*quick, "3"], [path, "restart: never"]),
    }, preload="[tests.bin.preloads.slow_reply]"))
    doc = finish(job, home, code=1)  # three failed on purpose
    assert {p["name"]: (p["start"], p["exit_code"]) for p in doc["processes"]} == {
        "zero": ("warm", 0), "three": ("warm", 3)}, job.output()
