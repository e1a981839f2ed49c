"""The member a world waits for, named from the members' own call timings (no code of
the user's): in status, in its document, in the metrics (a real Prometheus asked), to
the leader's job.events(), and drilled (mwrun drill --signal SLOW)."""

import shutil
import signal
import sys

import pytest

from mwrun.head.observe.slowness import FLOOR_S, MIN_CALLS
from tests.helpers import BIN, free_port, wait_gone
from tests.integration.jobs import (
    cli,
    expect,
    launch,
    status,
    wait_for,
    wait_status,
    world_state,
)
from tests.integration.test_fault_timeline import records
from tests.integration.test_readme_prometheus import _scrape_or_none, values

pytestmark = pytest.mark.timeout(180)


def test_a_member_late_to_every_all_reduce_is_named(procs, home, tmp_path):
    port = free_port()
    gate = tmp_path / "late"
    gate.touch()
    extra = {0: " --events", 2: f" --late 0.04 --late-while {gate}"}
    members = "".join(f"  m{i}:\n    cmd: {sys.executable} {BIN / 'lagging.py'}"
                      f"{extra.get(i, '')}\n" for i in range(3))
    topology = tmp_path / "lag.yaml"
    topology.write_text(f"version: 1\nname: lag\nmetrics: {{addr: 127.0.0.1:{port}}}\n"
                        f"processes:\n{members}worlds:\n  w: {{members: [m0, m1, m2]}}\n")
    job = launch(procs, home, topology, "--run-id", "lag")
    job.expect(lambda line: "every world formed" in str(line), 120)  # the run answers
    wait_status(home, lambda d: d["worlds"][0]["state"] == "healthy", "the world formed",
                timeout=90)
    doc = wait_status(home, lambda d: d["worlds"][0]["slow"] is not None,
                      "the late member named", timeout=120)
    slow = world_state(doc, "w")["slow"]
    assert slow["member"] == "m2"
    assert slow["lag_s"] >= FLOOR_S and slow["calls"] >= MIN_CALLS  # as the rule names one
    assert min(slow["waits_s"]["m0"], slow["waits_s"]["m1"]) > slow["waits_s"]["m2"]

    shown = cli(home, "status", check=True).stdout
    assert "slow members" in shown and "w: m2 (its peers wait" in shown
    got = wait_for(lambda: (m := _scrape_or_none(f"127.0.0.1:{port}")) and
                   {labels: v for (name, labels), v in m.items()
                    if name == "mwrun_world_slow_member_lag_seconds"}, 60, "the metric")
    assert list(got) == [(("process", "m2"), ("world", "w"))]
    if shutil.which("prometheus") is not None:  # (.ci/run installs it)
        prometheus_holds_the_slow_member(procs, tmp_path, port)
    # every member's all_reduce timed into the world's call-time histogram; the late
    # member's peers wait about --late in each, so they fill the buckets above 25 ms
    scraped = _scrape_or_none(f"127.0.0.1:{port}")
    reduce = (("operation", "all_reduce"), ("world", "w"))
    count = scraped[("mwrun_world_call_seconds_count", reduce)]
    assert count >= 3 * MIN_CALLS
    assert scraped[("mwrun_world_call_seconds_bucket", (("le", "+Inf"), *reduce))] == count
    assert scraped[("mwrun_world_call_seconds_bucket", (("le", "0.025"), *reduce))] < count
    assert status(home)["worlds"][0]["slow"]["member"] == "m2"

    # the leader follows it: job.events() said so, and says so when m2 is late no more
    named = expect(job, "m0", "slow", timeout=60)
    assert named["member"] == "m2" and named["lag_s"] >= FLOOR_S, named
    gate.unlink()
    cleared = expect(job, "m0", "slow", timeout=90)
    assert cleared["member"] is None, cleared
    told = [(r["member"], r["world"]) for r in records(home, "lag") if r["event"] == "slow"]
    assert told == [("m2", "w"), (None, "w")]
    cli(home, "stop", "lag", check=True)
    assert job.wait(timeout=60) == 0
    wait_gone(home)


def test_a_slow_member_drill_names_each_member_it_made_late(procs, home, tmp_path):
    """mwrun drill --signal SLOW: two members of a healthy world made late in turn
    (seed 7: m1, then m2), each named by the head, each lateness in the history."""
    members = "".join(f"  m{i}:\n    cmd: {sys.executable} {BIN / 'lagging.py'}\n"
                      for i in range(3))
    topology = tmp_path / "lag.yaml"
    topology.write_text(f"version: 1\nname: lag\nprocesses:\n{members}"
                        "worlds:\n  w: {members: [m0, m1, m2]}\n")
    job = launch(procs, home, topology, "--run-id", "lag")
    job.expect(lambda line: "every world formed" in str(line), 120)
    wait_status(home, lambda d: d["worlds"][0]["state"] == "healthy", "the world formed",
                timeout=90)
    bad = cli(home, "drill", "lag", "--signal", "SLOW", "--delay", "11", "--every", "2",
              "--for", "3")
    assert bad.returncode == 2 and "--delay must be more than 0 and at most 10" in bad.stderr
    bad = cli(home, "kill-world", "w", "lag", "--signal", "SLOW", "--for", "0")
    assert bad.returncode == 2 and "Invalid value for --for" in bad.stderr

    done = cli(home, "drill", "lag", "--signal", "SLOW", "--every", "2", "--for", "3",
               "--seed", "7", "--delay", "0.03")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("drill: m1 of w 30 ms late: named after ")
    assert lines[1].startswith("drill: m2 of w 30 ms late: named after ")
    assert lines[-1].startswith("drill: 2 member(s) made 30 ms late; 2 named (median ")
    # the head tells a verdict at its next sample (a second at most) after status shows it
    history = wait_for(lambda: (h := records(home, "lag")) and [
        r["member"] for r in h if r["event"] == "slow" and r["member"]] == ["m1", "m2"] and h,
        30, "both named in the history")
    late = [(r["process"], r["delay_s"]) for r in history if r["event"] == "late"]
    assert late == [("m1", 0.03), ("m1", 0.03), ("m2", 0.03), ("m2", 0.03)]  # on, then off
    assert not [r for r in history if r["event"] in ("break", "signal", "exit")]
    cli(home, "stop", "lag", check=True)
    assert job.wait(timeout=60) == 0
    wait_gone(home)


def prometheus_holds_the_slow_member(procs, tmp_path, port: int) -> None:
    """A real Prometheus scraping the endpoint answers a PromQL query with it."""
    config = tmp_path / "prometheus.yml"
    config.write_text("scrape_configs:\n  - job_name: mwrun\n    scrape_interval: 1s\n"
                      f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
    prom = f"127.0.0.1:{free_port()}"
    server = procs.start(["prometheus", f"--config.file={config}",
                          f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address={prom}"])
    lagging = wait_for(lambda: values(prom, "max by (process) (max_over_time("
                                      "mwrun_world_slow_member_lag_seconds[5m]))", "process"),
                       90, "Prometheus to hold the slow member")
    assert list(lagging) == ["m2"] and lagging["m2"] >= FLOOR_S
    server.signal(signal.SIGTERM)
    assert server.wait(timeout=60) == 0
