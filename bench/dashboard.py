"""docs/dashboard.png: the Grafana dashboard (docs/grafana-dashboard.json) over a real
run, drawn from its own queries against a real Prometheus.

    python bench/dashboard.py             # about 4 minutes; needs Debian's prometheus

Grafana itself cannot be installed here (no network but PyPI and Debian, and Debian
ships no Grafana), so each panel is drawn with matplotlib from the answer of exactly
its queries (``query_range`` over the run, a point every 2 s), in the dashboard's
layout. The run: README's serving job (a frontend, 2 workers, one pair world each)
beside a training world (3 members all_reducing every 20 ms), scraped every 2 s. At
30 s pair-0 is killed; at 60 s ``scale worker=3``; at 90 s train's rank 2 is made 20 ms
late to every call for 40 s (``kill-world --signal SLOW``); at 150 s ``scale worker=2``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PY, Launched

ROOT = Path(__file__).resolve().parents[1]
STEP = 2  # seconds between a panel's points (the scrape interval)
SCRIPT = ((30, ["kill-world", "pair-0"]), (60, ["scale", "worker=3"]),
          (90, ["kill-world", "train", "--rank", "2", "--signal", "SLOW", "--delay", "0.02",
                "--for", "40"]),
          (150, ["scale", "worker=2"]))
LENGTH = 190  # seconds of run drawn


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def topology(folder: Path, port: int) -> Path:
    serve = (ROOT / "configs" / "serve.yaml").read_text().replace("cwd: ..", f"cwd: {ROOT}")
    serve = serve.replace("python ", f"{PY} ").replace("name: serve", "name: dashboard")
    head, worlds = serve.split("worlds:\n")
    trainers = "".join(f"  t{i}:\n    cmd: [{PY}, {ROOT / 'bench' / 'bin' / 'reducer.py'}]\n"
                       "    restart: on-failure\n" for i in range(3))
    path = folder / "dashboard.yaml"
    path.write_text(f"{head}{trainers}metrics: {{addr: 127.0.0.1:{port}}}\nworlds:\n{worlds}"
                    "  train: {members: [t0, t1, t2]}\n")
    return path


def query_range(prom: str, expr: str, start: float, end: float) -> list[dict]:
    url = f"http://{prom}/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": STEP})
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)["data"]["result"]


def legend(template: str, labels: dict) -> str:
    for key, value in labels.items():
        template = template.replace("{{" + key + "}}", value)
    return template


def draw(dashboard: dict, answers: list[list[list[dict]]], start: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = dashboard["panels"]
    rows = math.ceil(len(panels) / 2)
    fig, axes = plt.subplots(rows, 2, figsize=(13, 2.3 * rows), squeeze=False)
    for ax, panel, answer in zip(axes.flat, panels, answers, strict=False):
        for target, series in zip(panel["targets"], answer, strict=True):
            for one in series:
                xs = [float(t) - start for t, _ in one["values"]]
                ys = [float(v) for _, v in one["values"]]
                ax.plot(xs, ys, linewidth=1, label=legend(target["legendFormat"], one["metric"]))
        ax.set_title(panel["title"], fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
        ax.set_xlim(0, LENGTH)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=6, loc="upper left", frameon=False,
                      ncol=max(1, min(4, len(ax.lines) // 3)))
        unit = panel["fieldConfig"]["defaults"].get("unit", "")
        if unit and unit != "short":
            ax.set_ylabel(unit, fontsize=7)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("seconds since the run started", fontsize=8)
    fig.suptitle("docs/grafana-dashboard.json over a real run (bench/dashboard.py)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def main() -> None:
    if shutil.which("prometheus") is None:
        raise SystemExit("needs Prometheus: apt-get install --no-install-recommends prometheus")
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    port, prom = free_port(), f"127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder) / "home"
        config = Path(folder) / "prometheus.yml"
        config.write_text(f"scrape_configs:\n  - job_name: mwrun\n    scrape_interval: {STEP}s\n"
                          f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
        server = subprocess.Popen(["prometheus", f"--config.file={config}",
                                   f"--storage.tsdb.path={Path(folder) / 'tsdb'}",
                                   f"--web.listen-address={prom}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        job = Launched(topology(Path(folder), port), home, "--run-id", "dashboard")
        try:
            job.healthy(300)
            start = time.time()
            for at, command in SCRIPT:
                time.sleep(max(0.0, start + at - time.time()))
                done = subprocess.run([PY, "-m", "mwrun", *command], capture_output=True,
                                      text=True, env={**os.environ, "MWRUN_HOME": str(home)})
                print(f"{at:4d} s  mwrun {' '.join(command)}: "
                      f"{(done.stdout or done.stderr).strip().splitlines()[-1:]}")
            time.sleep(max(0.0, start + LENGTH - time.time()))
            end = time.time()
            answers = [[query_range(prom, t["expr"].replace('job=~"$job"', 'job=~".+"'),
                                    start, end) for t in panel["targets"]]
                       for panel in dashboard["panels"]]
        finally:
            job.stop()
            server.terminate()
            server.wait(30)
    out = ROOT / "docs" / "dashboard.png"
    draw(dashboard, answers, start, out)
    empty = [p["title"] for p, a in zip(dashboard["panels"], answers, strict=True)
             if not any(a)]
    print(f"wrote {out}; panels with no data: {empty or 'none'}")


if __name__ == "__main__":
    main()
