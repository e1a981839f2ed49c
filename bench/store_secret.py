"""What a per-run shared secret in the world protocol would cost (not in mwrun).

    python bench/store_secret.py            # 40 joins and 40 breaks per variant, ~1 min
    python bench/store_secret.py --rounds 10

torch's TCPStore has no authentication: any local user who finds a world's port can
write its keys (a forged ``broken`` breaks the world). Two ways a secret handed to
every member in the environment could enter the protocol, each timed against the
plain protocol, interleaved, on a real store and real 2-rank gloo groups (ranks are
threads of this process, as the cost compared is per rank):

``prefix``
    Every key (mwrun's and the gloo rendezvous') under ``SECRET/``, through a torch
    PrefixStore. Protects nothing in torch 2.13: any client can ``list_keys()``.
``signed``
    Values are signed with HMAC-SHA256 of the secret: each member signs its arrival
    and checks every other arrival before it builds the group (one more round trip),
    and a break's reason carries a signature the watcher checks before it acts.
    Forged decisions would be ignored; the rendezvous keys and deletions stay open.

Join: from a member's first store call to its gloo group being built. Break: from
``mark_broken`` to the (other) member's watcher having the checked reason in hand.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import statistics
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from mwrun import protocol
from mwrun.worlds import backends

SIZE = 2
SECRET = os.urandom(16).hex()


def sign(key: str, value: str) -> str:
    return hmac.new(SECRET.encode(), f"{key}={value}".encode(), hashlib.sha256).hexdigest()


def signed(key: str, value: str) -> str:
    return f"{value}|{sign(key, value)}"


def checked(key: str, raw) -> str:
    value, _, mac = protocol.text(raw).rpartition("|")
    if not hmac.compare_digest(mac, sign(key, value)):
        raise ValueError(f"forged value at {key}")
    return value


def join(variant: str, port: int, generation: int, rank: int, out: dict) -> None:
    started = time.perf_counter()
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=30))
    if variant == "prefix":
        store = dist.PrefixStore(f"{SECRET}/", store)
    arrivals = protocol.arrival_keys(generation, SIZE)
    mine = signed(arrivals[rank], "here") if variant == "signed" else "here"
    store.set(arrivals[rank], mine)
    store.wait(arrivals, timedelta(seconds=30))
    if variant == "signed":
        for key, raw in zip(arrivals, store.multi_get(arrivals), strict=True):
            checked(key, raw)
    prefixed = dist.PrefixStore(protocol.pg_prefix(generation), store)
    group = backends.gloo(prefixed, rank, SIZE, 30.0, "127.0.0.1")
    out[rank] = (time.perf_counter() - started, store, group)


def one_join(variant: str, port: int, generation: int):
    out: dict = {}
    threads = [threading.Thread(target=join, args=(variant, port, generation, r, out))
               for r in range(SIZE)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def one_break(variant: str, stores, generation: int) -> float:
    """Rank 0 marks the break; rank 1's watcher wakes and reads (and checks) why."""
    watcher_store = stores[1]
    woke = {}

    def watch():
        wake = protocol.wake_key(generation, 1)
        watcher_store.wait([wake], timedelta(seconds=30))
        key = protocol.key(generation, "broken")
        raw = watcher_store.get(key)
        woke["reason"] = checked(key, raw) if variant == "signed" else protocol.text(raw)
        woke["at"] = time.perf_counter()

    thread = threading.Thread(target=watch)
    thread.start()
    time.sleep(0.02)  # the watcher must be asleep in the store, as it is in mwrun
    started = time.perf_counter()
    key = protocol.key(generation, "broken")
    reason = "worker-0 was killed by SIGKILL"
    protocol.mark_broken(stores[0], generation, SIZE,
                         signed(key, reason) if variant == "signed" else reason)
    thread.join()
    assert woke["reason"] == reason, woke
    return woke["at"] - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    variants = ("plain", "prefix", "signed")
    joins: dict[str, list[float]] = {v: [] for v in variants}
    breaks: dict[str, list[float]] = {v: [] for v in variants}
    server = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
    generation = 0
    for _ in range(args.rounds):
        for variant in variants:  # interleaved: the loopback's pace drifts
            out = one_join(variant, server.port, generation)
            joins[variant].append(max(t for t, _, _ in out.values()))
            stores = [out[r][1] for r in range(SIZE)]
            breaks[variant].append(one_break(variant, stores, generation))
            for _, _, group in out.values():
                group.abort()
                group.release()
            generation += 1
    base_join = statistics.median(joins["plain"])
    base_break = statistics.median(breaks["plain"])
    print(f"{'variant':8} {'join (median)':>14} {'vs plain':>9} {'break (median)':>15}"
          f" {'vs plain':>9}")
    for variant in variants:
        j, b = statistics.median(joins[variant]), statistics.median(breaks[variant])
        print(f"{variant:8} {j * 1e3:11.2f} ms {(j - base_join) * 1e3:+7.2f}ms"
              f" {b * 1e3:12.3f} ms {(b - base_break) * 1e3:+7.3f}ms")
    secret = [k for k in server.list_keys() if k.startswith(SECRET)]
    print(f"any client can list the keys, the secret prefix with them: {secret[0]}")
    os._exit(0)  # gloo groups of the last rounds may still be shutting down


if __name__ == "__main__":
    main()
