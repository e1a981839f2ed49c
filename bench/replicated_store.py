"""What a replicated store would cost the world protocol, beside torch's TCPStore (not
in mwrun: the paper for a head whose *machine* dies, bench/README.rst).

    python bench/replicated_store.py          # ~20 s; needs etcd (apt-get install etcd-server)
    python bench/replicated_store.py --ops 1000

Three etcd members on 127.0.0.1 (their own temporary folders and free ports, stopped
at the end), written through etcd's JSON gateway on one keep-alive connection, against
one TCPStore server on 127.0.0.1, in the same run. What the head does to a world's
store most: a put (``set``), a compare-and-set (``mark_broken``'s first-reason-wins),
and a put seen by a member waiting on that key (a break waking a watcher: ``wait``
on TCPStore, a watch on etcd). The members here share one disk and no network: a
real cluster adds a round trip between machines and each member's fsync.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

MEMBERS = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_etcd(folder: Path) -> tuple[list[subprocess.Popen], int]:
    peers = [free_port() for _ in range(MEMBERS)]
    clients = [free_port() for _ in range(MEMBERS)]
    cluster = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, p in enumerate(peers))
    procs = []
    for i in range(MEMBERS):
        procs.append(subprocess.Popen(
            ["etcd", "--name", f"e{i}", "--data-dir", str(folder / f"e{i}"),
             "--listen-client-urls", f"http://127.0.0.1:{clients[i]}",
             "--advertise-client-urls", f"http://127.0.0.1:{clients[i]}",
             "--listen-peer-urls", f"http://127.0.0.1:{peers[i]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peers[i]}",
             "--initial-cluster", cluster, "--initial-cluster-state", "new",
             "--initial-cluster-token", "mwrun-bench"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs, clients[0]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class Etcd:
    def __init__(self, port: int):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def post(self, path: str, body: dict) -> dict:
        self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        return json.loads(self.conn.getresponse().read())

    def put(self, key: str, value: str) -> None:
        self.post("/v3/kv/put", {"key": b64(key), "value": b64(value)})

    def compare_set(self, key: str, value: str) -> None:
        k = b64(key)
        self.post("/v3/kv/txn", {
            "compare": [{"key": k, "target": "CREATE", "create_revision": "0",
                         "result": "EQUAL"}],
            "success": [{"request_put": {"key": k, "value": b64(value)}}],
            "failure": [{"request_range": {"key": k}}]})

    def watch(self, prefix: str, seen: dict) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port)
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        conn.request("POST", "/v3/watch", json.dumps(
            {"create_request": {"key": b64(prefix), "range_end": b64(end)}}))
        response = conn.getresponse()
        while line := response.readline():
            for event in json.loads(line).get("result", {}).get("events", []):
                seen[base64.b64decode(event["kv"]["key"]).decode()] = time.perf_counter()

    def ready(self) -> bool:
        try:
            self.put("mwrun/ready", "1")
            return True
        except (OSError, ValueError, http.client.HTTPException):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            return False


def timed(ops: int, one) -> list[float]:
    took = []
    for i in range(ops):
        start = time.perf_counter()
        one(i)
        took.append(time.perf_counter() - start)
    return took


def etcd_figures(port: int, ops: int) -> dict[str, list[float]]:
    etcd = Etcd(port)
    deadline = time.monotonic() + 30
    while not etcd.ready():
        if time.monotonic() > deadline:
            raise SystemExit("etcd did not start within 30 s")
        time.sleep(0.2)
    seen: dict[str, float] = {}
    threading.Thread(target=etcd.watch, args=("mwrun/wake/", seen), daemon=True).start()
    time.sleep(0.5)  # the watch is made

    def woken(i: int) -> float:
        key, start = f"mwrun/wake/{i}", time.perf_counter()
        etcd.put(key, "broken")
        while key not in seen:
            time.sleep(0.0001)
        return seen[key] - start

    return {"put": timed(ops, lambda i: etcd.put(f"mwrun/w{i % 64}/g1/gen", "1")),
            "compare-and-set": timed(ops, lambda i: etcd.compare_set(f"mwrun/c{i}", "r")),
            "put -> waiter told": [woken(i) for i in range(ops // 2)]}


def tcpstore_figures(ops: int) -> dict[str, list[float]]:
    import torch.distributed as dist

    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, None, True, timeout=timedelta(seconds=10),
                           wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=10))
    waiter = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=10))

    def woken(i: int) -> float:
        told: dict[str, float] = {}
        thread = threading.Thread(target=lambda: (waiter.wait([f"wake{i}"]),
                                                  told.setdefault("t", time.perf_counter())))
        thread.start()
        time.sleep(0.002)  # it waits
        start = time.perf_counter()
        client.set(f"wake{i}", "broken")
        thread.join()
        return told["t"] - start

    figures = {"put": timed(ops, lambda i: client.set(f"mwrun/w{i % 64}/g1/gen", "1")),
               "compare-and-set": timed(ops, lambda i: client.compare_set(f"c{i}", "", "r")),
               "put -> waiter told": [woken(i) for i in range(ops // 2)]}
    del server
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=400)
    args = parser.parse_args()
    if shutil.which("etcd") is None:
        sys.exit("etcd is not installed (Debian: apt-get install etcd-server)")
    with tempfile.TemporaryDirectory(prefix="mwrun-etcd-") as tmp:
        procs, port = start_etcd(Path(tmp))
        try:
            ours = tcpstore_figures(args.ops)
            theirs = etcd_figures(port, args.ops)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=30)
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores; {MEMBERS} etcd members on"
          " 127.0.0.1 (one disk) against one TCPStore, medians (p99):")
    for what in ours:
        a, b = statistics.median(ours[what]), statistics.median(theirs[what])
        p99 = sorted(theirs[what])[int(len(theirs[what]) * 0.99)]
        print(f"  {what}: TCPStore {a * 1000:.3f} ms, etcd {b * 1000:.2f} ms"
              f" (p99 {p99 * 1000:.2f} ms): {b / a:.0f} x")


if __name__ == "__main__":
    main()
