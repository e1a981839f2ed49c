"""Warm starts on real processes: a child forked from the zygote is what a fresh one
would be, ends as a fresh one would, and the zygote's death costs nothing."""

import json
import os
import signal
import sys

import psutil
import pytest

from tests.helpers import BIN, ROOT, leftovers
from tests.integration.jobs import cli, launch, proc_state, status, wait_for

pytestmark = pytest.mark.timeout(120)
PY = sys.executable
# Differ between two processes by design: their own names, ports and worlds.
OWN = {"MASTER_PORT", "MWRUN_WORLDS", "MWRUN_PROCESS", "ROLE_NAME"}


def write(tmp_path, processes: dict, preload="[torch]") -> str:  # [torch]: the default
    """A job of one world per process; processes: name -> (cmd, extra yaml)."""
    lines = ["version: 1", "name: warm", f"preload: {preload}", "processes:"]
    for name, (cmd, extra) in processes.items():
        lines += [f"  {name}:", f"    cmd: {json.dumps(cmd)}", f"    cwd: {ROOT}"]
        lines += [f"    {line}" for line in extra]
    lines.append("worlds:")
    lines += [f"  w-{name}: {{members: [{name}]}}" for name in processes]
    path = tmp_path / "warm.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def finish(job, home, code=0):
    """The job's final status document, once it ended with ``code`` leaving nothing."""
    assert job.wait(90) == code, job.output()
    assert leftovers(home) == []  # zygote and children gone, before any fixture cleans up
    (run,) = os.listdir(home / "runs")
    return status(home, run)


def test_a_forked_child_sees_what_a_fresh_one_does(procs, home, tmp_path):
    out = {n: tmp_path / f"{n}.json" for n in ("warm", "cold", "warm2", "cold2", "wmod", "cmod")}
    script = [PY, str(BIN / "fields.py"), "--out", str(tmp_path)]
    module = [PY, "-m", "tests.bin.fields", "--out", str(tmp_path)]
    topology = write(tmp_path, {
        "warm": ([*script, "--torch"], ["cpus: 1"]),
        "cold": ([*script, "--torch"], ["cpus: 1", "preload: false"]),
        "warm2": ([*script, "--torch"], []),
        "cold2": ([*script, "--torch"], ["preload: false"]),
        "wmod": (module, []),
        "cmod": (module, ["preload: false"]),
    })
    job = launch(procs, home, topology)
    doc = finish(job, home)
    got = {name: json.loads(path.read_text()) for name, path in out.items()}
    starts = {p["name"]: p["start"] for p in doc["processes"]}
    assert starts == {"warm": "warm", "cold": "cold", "warm2": "warm", "cold2": "cold",
                      "wmod": "warm", "cmod": "cold"}
    said = cli(home, "status", doc["run_id"], check=True).stdout.splitlines()
    assert [line for line in said if line.startswith("started cold")] == [
        "started cold (preload: false): cold, cold2, cmod"]  # why, once
    for warm, cold in (("warm", "cold"), ("warm2", "cold2"), ("wmod", "cmod")):
        a, b = got[warm], got[cold]
        assert a["name"] == "__main__"
        assert set(a["env"]) == set(b["env"])
        assert {k: v for k, v in a["env"].items() if k not in OWN} == \
               {k: v for k, v in b["env"].items() if k not in OWN}
        assert a["proc_environ"] == a["env"] and b["proc_environ"] == b["env"]
        assert a["proc_cmdline"] == b["proc_cmdline"]
        same = ("main_globals", "file", "loader", "spec", "argv", "orig_argv", "path", "cwd",
                "session_leader", "group_leader", "ppid", "signals", "blocked", "fds",
                "stdout", "flags", "threads")
        assert {k: a[k] for k in same} == {k: b[k] for k in same}, warm
    # Pinned to one CPU each (different ones), with torch threads to match.
    assert len(got["warm"]["affinity"]) == len(got["cold"]["affinity"]) == 1
    assert got["warm"]["affinity"] != got["cold"]["affinity"]
    assert got["warm2"]["affinity"] == got["cold2"]["affinity"] == sorted(os.sched_getaffinity(0))
    assert got["warm"]["torch_threads"] == got["cold"]["torch_threads"] == 1
    # torch seeds each fresh process from the OS (torch 2.13), so must each warm one;
    # Python's random is reseeded too.
    seeds = [got[n]["torch_seed"] for n in ("warm", "warm2", "cold")]
    assert len(set(seeds)) == 3
    assert got["warm"]["torch_rand"] != got["warm2"]["torch_rand"]
    assert len({got[n]["random"] for n in ("warm", "warm2", "wmod")}) == 3


def test_a_warm_child_starts_with_mwruns_library_imported_unless_it_would_import_another(
        procs, home, tmp_path):
    """The zygote that preloads torch imports mwrun's library too (most of a child's own
    start): a warm child finds it imported, never the zygote's own machinery; a script
    beside another package named mwrun imports that one, as a fresh process would."""
    own = tmp_path / "own"
    (own / "mwrun").mkdir(parents=True)
    (own / "mwrun" / "__init__.py").write_text("OWN = True\n")
    (own / "library.py").write_text((BIN / "library.py").read_text())
    topology = write(tmp_path, {
        "warm": ([PY, str(BIN / "library.py"), "--out", str(tmp_path)], []),
        "cold": ([PY, str(BIN / "library.py"), "--out", str(tmp_path)], ["preload: false"]),
        "beside": ([PY, str(own / "library.py"), "--out", str(tmp_path)], []),
    })
    job = launch(procs, home, topology)
    doc = finish(job, home)
    assert {p["name"]: p["start"] for p in doc["processes"]} == {
        "warm": "warm", "cold": "cold", "beside": "warm"}
    got = {n: json.loads((tmp_path / f"{n}.json").read_text()) for n in ("warm", "cold",
                                                                          "beside")}
    assert "mwrun.worlds.job" in got["warm"]["at_start"]
    assert not [m for m in got["warm"]["at_start"] if m.startswith("mwrun.host")]
    assert got["warm"]["origin"] == got["cold"]["origin"]
    assert (got["cold"]["at_start"], got["cold"]["own"]) == ([], False)
    assert got["warm"]["host"] is got["cold"]["host"] is False
    assert (got["beside"]["at_start"], got["beside"]["own"]) == ([], True)
    assert got["beside"]["origin"] == str(own / "mwrun" / "__init__.py")


def test_exits_and_signals_are_reported_as_for_a_fresh_process(procs, home, tmp_path):
    hows = ("code", "message", "exception", "interrupt", "signal")
    processes = {}
    for how in hows:
        cmd = [PY, str(BIN / "ending.py"), how]
        processes[f"warm-{how}"] = (cmd, [])
        processes[f"cold-{how}"] = (cmd, ["preload: false"])
    job = launch(procs, home, write(tmp_path, processes))
    doc = finish(job, home, code=1)
    codes = {p["name"]: p["exit_code"] for p in doc["processes"]}
    assert [codes[f"warm-{h}"] for h in hows] == [codes[f"cold-{h}"] for h in hows] == \
           [3, 1, 1, -signal.SIGINT, -signal.SIGTERM]
    assert {p["start"] for p in doc["processes"] if p["name"].startswith("warm")} == {"warm"}
    for how in hows:  # the same words on stderr: tracebacks, messages
        logs = [cli(home, "logs", f"{kind}-{how}", doc["run_id"], check=True
                    ).stdout.strip().splitlines() for kind in ("warm", "cold")]
        assert logs[0] == logs[1], how
    assert "ValueError: uncaught" in cli(home, "logs", "warm-exception", doc["run_id"]).stdout


def test_a_native_crash_writes_its_python_stack_to_the_log_warm_or_cold(procs, home,
                                                                      tmp_path):
    """mwrun sets PYTHONFAULTHANDLER=1 (unless the topology's env sets it): a process
    killed by SIGSEGV says where, in its log. A forked child keeps its zygote's fault
    handlers when it resets its other dispositions to a fresh process's (it used to reset
    them too, and a warm child said nothing, even where the user set it)."""
    cmd = [PY, str(BIN / "ending.py"), "segfault"]
    job = launch(procs, home, write(tmp_path, {
        "warm": (cmd, []), "cold": (cmd, ["preload: false"]),
        "quiet": (cmd, ["env: {PYTHONFAULTHANDLER: ''}"])}))
    doc = finish(job, home, code=1)
    assert {p["name"]: p["exit_code"] for p in doc["processes"]} == {
        "warm": -signal.SIGSEGV, "cold": -signal.SIGSEGV, "quiet": -signal.SIGSEGV}
    for name in ("warm", "cold"):
        log = cli(home, "logs", name, doc["run_id"], check=True).stdout
        assert "Fatal Python error: Segmentation fault" in log, (name, log)
        assert f'File "{BIN / "ending.py"}", line ' in log and " in crash" in log, (name, log)
    assert "Fatal Python error" not in cli(home, "logs", "quiet", doc["run_id"]).stdout


def test_multiprocessing_and_dataloader_workers_work_when_warm(procs, home, tmp_path):
    topology = write(tmp_path, {"pools": ([PY, str(BIN / "pools.py")], [])})
    job = launch(procs, home, topology)
    doc = finish(job, home)
    assert proc_state(doc, "pools")["start"] == "warm"
    assert '"loader": 28.0' in cli(home, "logs", "pools", doc["run_id"], check=True).stdout


def zygotes(supervisor_pid):
    """The zygotes of the head's machine: its agent's children."""
    found = []
    for child in psutil.Process(supervisor_pid).children(recursive=True):
        try:
            if " ".join(child.cmdline()) == "mwrun zygote (preload torch)":
                found.append(child.pid)
        except psutil.Error:
            pass
    return found


def test_a_killed_zygote_is_replaced_and_its_children_live_on(procs, home, tmp_path):
    idle = tmp_path / "idle.py"
    idle.write_text("import time\nimport torch\nprint('up', flush=True)\ntime.sleep(120)\n")
    topology = write(tmp_path, {"worker": ([PY, str(idle)], ["restart: always"])})
    job = launch(procs, home, topology)
    job.expect(lambda line: line.startswith("worker ") and line.endswith("| up"))
    doc = status(home)
    worker = proc_state(doc, "worker")["pid"]
    (first,) = wait_for(lambda: zygotes(doc["supervisor_pid"]), what="the zygote")
    os.kill(first, signal.SIGKILL)
    (second,) = wait_for(lambda: [z for z in zygotes(doc["supervisor_pid"]) if z != first],
                         what="a new zygote")
    job.expect(lambda line: "starting a new one" in line)
    assert proc_state(status(home), "worker")["pid"] == worker  # untouched by its death
    cli(home, "kill-world", "w-worker", check=True)
    # restarted, from the new zygote
    job.expect(lambda line: line.startswith("worker ") and line.endswith("| up"))
    doc = status(home)
    assert proc_state(doc, "worker")["start"] == "warm"
    assert proc_state(doc, "worker")["restarts"] == 1
    assert zygotes(doc["supervisor_pid"]) == [second]
    job.signal(signal.SIGINT)
    finish(job, home)


def test_a_zygote_that_cannot_fork_starts_processes_cold_with_one_warning(procs, home,
                                                                          tmp_path):
    ok = [PY, str(BIN / "ending.py"), "none"]
    path = f"env: {{PYTHONPATH: {ROOT}}}"
    topology = write(tmp_path, {
        "threaded-0": (ok, ["preload: [tests.bin.threader]", path]),
        "threaded-1": (ok, ["preload: [tests.bin.threader]", path]),
        # Found by validate (its package is there), failing only as the zygote imports it.
        "missing": (ok, ["preload: [tests.bin.unimportable]", path]),
    })
    job = launch(procs, home, topology)
    doc = finish(job, home)
    assert {p["name"]: (p["start"], p["exit_code"]) for p in doc["processes"]} == {
        "threaded-0": ("cold", 0), "threaded-1": ("cold", 0), "missing": ("cold", 0)}
    said = [line for line in job.lines if "warm start not possible" in line]
    assert len([s for s in said if "1 Python thread running" in s]) == 1, said
    assert len([s for s in said if "import tests.bin.unimportable" in s]) == 1, said
    status_text = cli(home, "status", doc["run_id"], check=True).stdout
    assert "started cold (its zygote could not start it; see the run's events): threaded-0," \
        " threaded-1, missing" in status_text


def test_processes_start_before_the_supervisor_has_imported_torch(procs, home, tmp_path):
    # The stores' keeper needs torch; the job must not wait for that import. The process
    # lives until the keeper's import began (else the run could end before it does).
    mark = tmp_path / "torch-import-began"
    quick = ("import os, time; print(time.time(), flush=True);"
             f" [time.sleep(0.05) for _ in iter(lambda: os.path.exists({str(mark)!r}), True)]")
    topology = write(tmp_path, {"quick": ([PY, "-c", quick], [])}, preload="false")
    job = procs.start([PY, "-m", "mwrun", "launch", topology], env={
        "MWRUN_HOME": str(home), "NO_COLOR": "1", "PYTHONPATH": str(BIN / "slow_torch"),
        "SLOW_TORCH_IMPORT": "5", "SLOW_TORCH_MARK": str(mark)})
    started = float(job.expect(lambda line: line.startswith("quick ")).split("|")[1])
    finish(job, home)
    assert started < float(mark.read_text().split()[0])  # before torch began to load


def test_orphans_that_come_to_the_supervisor_are_reaped(procs, home, tmp_path):
    # As a child subreaper the supervisor inherits the job's orphans; none stays a zombie.
    parent = [PY, "-c", "import os, time\npid = os.fork()\nif pid == 0:\n    time.sleep(1)\n"
              "    os._exit(0)\nprint(pid, flush=True)\n"]
    idle = [PY, "-c", "import time; time.sleep(60)"]
    job = launch(procs, home, write(tmp_path, {"parent": (parent, []), "idle": (idle, [])},
                                    preload="false"))
    orphan = int(job.expect(lambda line: line.startswith("parent ")).split("|")[1])

    # pid_exists is true for a zombie too: only reaping makes it false.
    wait_for(lambda: not psutil.pid_exists(orphan), timeout=20, what="the orphan reaped")
    job.signal(signal.SIGINT)
    finish(job, home)
