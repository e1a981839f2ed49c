"""README's "Watch it in Prometheus", as written, against a real Prometheus (Debian's
``prometheus``; .ci/run installs it): the launch with ``--metrics``, the curl, the
scrape config, the fault and the scale operation, and every query, each answering what
README says it does. Port 9400 becomes a free port (the test's only change), and the
config's ``cwd`` the repository (as test_readme_scale does)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

from tests.docpages import literal_blocks
from tests.helpers import ROOT, free_port, wait_gone
from tests.integration.jobs import cli, status, wait_for, wait_status
from tests.integration.test_readme_drill import mwrun
from tests.integration.test_readme_scale import config_copy, healthy, workers

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("prometheus") is None,
                                 reason="needs Debian's prometheus (.ci/run installs it)")]


def section() -> str:
    text = (ROOT / "README.rst").read_text()
    return text.split("Watch it in Prometheus\n----------------------\n")[1].split(
        "\n\nmwrun and torchrun, measured")[0]


def query(prom: str, expr: str) -> list[dict]:
    url = f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        reply = json.load(answer)
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def values(prom: str, expr: str, label: str) -> dict[str, float]:
    """The query's answer by ``label``; {} while Prometheus is not listening yet."""
    try:
        found = query(prom, expr)
    except OSError:  # URLError too: still starting
        return {}
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in found}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of docs/grafana-dashboard.json, for every Prometheus
    job (its ``$job`` variable: all of them)."""
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    return [(panel["title"], target["expr"].replace('job=~"$job"', 'job=~".+"'))
            for panel in dashboard["panels"] for target in panel["targets"]]


def scrape(addr: str) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_readme_prometheus_as_written(procs, home, tmp_path):
    launch_block, scrape_config, break_block = literal_blocks(section())
    port = str(free_port())
    launch, curl = [line.replace("9400", port) for line in launch_block.splitlines()]
    assert launch.startswith("mwrun launch configs/serve.yaml --detach --metrics 127.0.0.1:")
    addr = f"127.0.0.1:{port}"
    launched = mwrun(home, launch.replace("configs/serve.yaml",
                                          config_copy(tmp_path, "serve.yaml")), tmp_path)
    assert launched.returncode == 0, launched.stderr
    try:
        wait_status(home, healthy, "the frontend and both workers serving", timeout=120)
        shown = subprocess.run(curl, shell=True, capture_output=True, text=True, timeout=30)
        assert 'world="pair-0"' in shown.stdout and 'state="healthy"' in shown.stdout, shown

        config = tmp_path / "prometheus.yml"
        config.write_text(scrape_config.replace("9400", port))
        prom = f"127.0.0.1:{free_port()}"
        server = procs.start(["prometheus", f"--config.file={config}",
                              f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                              f"--web.listen-address={prom}"])
        wait_for(lambda: values(prom, 'mwrun_world_calls_total{world="pair-0"}', "world")
                 .get("pair-0", 0) > 0, 90, "Prometheus to scrape pair-0's calls")

        commands = [line for line in break_block.splitlines() if line.startswith("mwrun ")]
        queries = [line.split("  #")[0].strip() for line in break_block.splitlines()
                   if line.strip() and not line.startswith("mwrun ")]
        assert commands == ["mwrun kill-world pair-0", "mwrun scale worker=3"]
        for command in commands:
            done = mwrun(home, command, tmp_path)
            assert done.returncode == 0, done.stderr
        wait_status(home, lambda d: len(workers(d)) == 3 and healthy(d)
                    and d["worlds"][0]["breaks"] == 1, "pair-0 mended and a third worker",
                    timeout=120)

        rate, breaks, restarts, broken, running = queries
        wait_for(lambda: values(prom, rate, "world").get("pair-0", 0) > 0, 90,
                 "a rate of calls for pair-0")
        wait_for(lambda: values(prom, breaks, "world").get("pair-0", 0) > 0, 90,
                 "pair-0's break")
        wait_for(lambda: sum(values(prom, restarts, "cause").values()) >= 1, 90,
                 "worker-0's restart")
        query(prom, broken)  # an alert's expression: a valid query (nothing broken now)
        wait_for(lambda: values(prom, running, "process").get("worker") == 3, 90,
                 "three running replicas")
        wait_for(lambda: values(prom, "mwrun_scale_operations_total", "operation")
                 .get("scale", 0) >= 1, 90, "the scale operation")
        wait_for(lambda: values(prom, "mwrun_fault_downtime_seconds_count", "world")
                 .get("pair-0", 0) == 1, 90, "the kill's downtime")

        # every panel of the dashboard users import is a query this Prometheus answers,
        # and those of what the test caused have data (their windows hold two scrapes)
        answered = {title: query(prom, expr) for title, expr in dashboard_queries()}
        for title in ("Worlds by state", "Calls per second, per world",
                      "Call time p99, per world and operation", "World breaks (per 5 min)",
                      "Restarts (per 5 min), by cause", "Replicas: desired, running, draining"):
            assert answered[title], title

        # a scrape and the status document of the same (settled) moment agree
        got, doc = scrape(addr), status(home)
        for world in doc["worlds"]:
            labels = (("world", world["name"]),)
            assert got[("mwrun_world_generation", labels)] == world["generation"]
            assert got[("mwrun_world_breaks_total", labels)] == world["breaks"]
        for proc in doc["processes"]:
            assert sum(v for (name, labels), v in got.items()
                       if name == "mwrun_process_restarts_total"
                       and ("process", proc["name"]) in labels) == proc["restarts"]
        server.signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    finally:
        cli(home, "stop")
    wait_gone(home)


def test_a_taken_metrics_port_is_refused_before_anything_starts(home, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "mwrun", "launch", config_copy(tmp_path, "serve.yaml"),
             "--metrics", addr], capture_output=True, text=True, timeout=120,
            env={**os.environ, "MWRUN_HOME": str(home)})
    assert done.returncode != 0
    assert f"metrics: {addr} is taken by another program" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


@pytest.mark.parametrize("addr, says", [
    ("192.0.2.1:9400", "is no address of this machine"),
    ("9400", "is not HOST:PORT"),
])
def test_a_metrics_address_the_head_cannot_serve_is_said(home, tmp_path, addr, says):
    done = mwrun(home, f"mwrun launch {config_copy(tmp_path, 'serve.yaml')} --metrics {addr}",
                 tmp_path)
    assert done.returncode != 0 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_metrics_on_a_plain_job_show_what_exists(procs, home, tmp_path):
    """A job with no scaled process and no library members (plain torch.distributed):
    the metrics that exist, and no error."""
    port = free_port()
    topology = tmp_path / "plain.yaml"
    topology.write_text(
        f"version: 1\nname: plain\nmetrics: {{addr: 127.0.0.1:{port}}}\nprocesses:\n"
        f"  a:\n    cmd: {sys.executable} -c 'import time; time.sleep(600)'\n"
        "worlds:\n  w: {members: [a]}\n")
    job = procs.start([sys.executable, "-m", "mwrun", "launch", str(topology)],
                      env={"MWRUN_HOME": str(home), "NO_COLOR": "1"})
    wait_for(lambda: cli(home, "status").returncode == 0, 60, "the run to answer")
    got = wait_for(lambda: _scrape_or_none(f"127.0.0.1:{port}"), 60, "a scrape")
    assert [v for (name, labels), v in got.items()
            if name == "mwrun_process_state" and ("process", "a") in labels] == [1]
    assert not any(name.startswith("mwrun_scale_") and labels for (name, labels) in got)
    assert not any(name == "mwrun_world_calls_total" for (name, _) in got)
    cli(home, "stop", check=True)
    assert job.wait(timeout=60) == 0
    wait_gone(home)


def _scrape_or_none(addr: str):
    try:
        return scrape(addr)
    except OSError:
        return None

