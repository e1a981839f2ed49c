"""The metrics endpoint at 128 processes and 64 worlds (issue 35's figures).

    python bench/metrics.py                   # about 3 minutes
    python bench/metrics.py --pairs 16 --windows 2

A job of PAIRS two-member worlds (bin/pair_member.py: rank 1 sends every 0.2 s), warm,
serving metrics (``metrics: {addr}``). Once every world is healthy it measures:

* a scrape's time (``GET /metrics``, the text made and read), median and max of 20;
* the head's CPU over WINDOW seconds with no scrape, and with a scrape every 5 s (what
  a Prometheus with ``scrape_interval: 5s`` costs), windows interleaved, medians;
* each world's generation and breaks, and each process's restarts, in a scrape against
  ``mwrun status --json`` taken right after (goal: equal).

The goals: a scrape <= 50 ms; the head's CPU unchanged at one scrape per 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PY, Launched

HERE = Path(__file__).resolve().parent


def topology(folder: Path, pairs: int, port: int) -> Path:
    worlds = "".join(f"  w{i}: {{members: [m-{2 * i}, m-{2 * i + 1}]}}\n"
                     for i in range(pairs))
    path = folder / "metrics.yaml"
    path.write_text(
        f"version: 1\nname: metrics\npreload: [torch]\nhang_timeout: 300\n"
        f"metrics: {{addr: 127.0.0.1:{port}}}\nprocesses:\n  m:\n    replicas: {2 * pairs}\n"
        f"    cmd: [{PY}, {HERE / 'bin' / 'pair_member.py'}, --interval, '0.2']\n"
        f"worlds:\n{worlds}")
    return path


def scrape(addr: str) -> tuple[float, str]:
    start = time.perf_counter()
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return time.perf_counter() - start, text


def cpu_over(head: psutil.Process, seconds: float, addr: str | None) -> float:
    """The head's CPU (% of a core) over ``seconds``, scraped every 5 s when ``addr``."""
    before, start = head.cpu_times(), time.monotonic()
    while time.monotonic() - start < seconds:
        if addr is not None:
            scrape(addr)
        time.sleep(min(5.0, max(seconds - (time.monotonic() - start), 0.0)))
    after = head.cpu_times()
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / (time.monotonic() - start)


def agree(text: str, doc: dict) -> list[str]:
    from prometheus_client.parser import text_string_to_metric_families

    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for family in text_string_to_metric_families(text) for s in family.samples}
    wrong = []
    for world in doc["worlds"]:
        labels = (("world", world["name"]),)
        for metric, field in (("mwrun_world_generation", "generation"),
                              ("mwrun_world_breaks_total", "breaks")):
            if got.get((metric, labels)) != world[field]:
                wrong.append(f"{metric}{{world={world['name']}}}: {got.get((metric, labels))}"
                             f" against {world[field]}")
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--window", type=float, default=30.0, help="seconds per CPU window")
    parser.add_argument("--windows", type=int, default=3, help="windows of each kind")
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    addr = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder) / "home"
        job = Launched(topology(Path(folder), args.pairs, port), home, "--run-id", "metrics")
        try:
            job.healthy(600)
            head = psutil.Process(job.popen.pid)
            time.sleep(5)  # the bring-up's last writes
            times = []
            for _ in range(20):
                took, text = scrape(addr)
                times.append(took)
            quiet, scraped = [], []
            for _ in range(args.windows):
                quiet.append(cpu_over(head, args.window, None))
                scraped.append(cpu_over(head, args.window, addr))
            _, text = scrape(addr)
            doc = json.loads(subprocess.run(
                [PY, "-m", "mwrun", "status", "metrics", "--json"], capture_output=True,
                text=True, check=True, env={**os.environ, "MWRUN_HOME": str(home)}).stdout)
            wrong = agree(text, doc)
        finally:
            job.stop()
    load = ", ".join(f"{x:.1f}" for x in psutil.getloadavg())
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {psutil.cpu_count()} cores,"
          f" {platform.machine()}, Python {platform.python_version()}, load {load}")
    print(f"{2 * args.pairs} processes, {args.pairs} worlds; a scrape is"
          f" {len(text.splitlines())} lines, {len(text) / 1024:.0f} KiB")
    print(f"  scrape: median {1e3 * statistics.median(times):.1f} ms,"
          f" max {1e3 * max(times):.1f} ms (20; goal <= 50 ms)")
    print(f"  head CPU, no scrape:          median {statistics.median(quiet):.2f} %"
          f" ({', '.join(f'{x:.2f}' for x in quiet)})")
    print(f"  head CPU, a scrape every 5 s: median {statistics.median(scraped):.2f} %"
          f" ({', '.join(f'{x:.2f}' for x in scraped)}); ratio"
          f" {statistics.median(scraped) / max(statistics.median(quiet), 1e-9):.2f}")
    print("  a scrape against status --json: " + ("equal" if not wrong else
                                                   "DIFFER: " + "; ".join(wrong[:5])))


if __name__ == "__main__":
    main()
