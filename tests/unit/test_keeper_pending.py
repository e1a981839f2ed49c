"""The worlds' stores as a running job changes: a world added while it runs gets a store
of its own on the port its revision chose; a removed world's store stays a while (its
members read why it closed there), and a world made again under a removed one's name is
never the one that goes. Real TCPStores on 127.0.0.1."""

import time

import pytest

from mwrun import protocol
from mwrun.keeper import pending
from mwrun.keeper.pending import PendingStores
from mwrun.plan import ports
from mwrun.plan.placement import WorldPlan

pytestmark = pytest.mark.timeout(60)


def world(name: str, port: int) -> WorldPlan:
    return WorldPlan(name, ("frontend", "worker-1"), "gloo", 10.0, "127.0.0.1", port, True,
                     "isolate")


def client(port: int):
    import datetime

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, None, False, timeout=datetime.timedelta(seconds=5))


def test_a_world_made_again_under_a_removed_ones_name_keeps_its_store(monkeypatch):
    monkeypatch.setattr(pending, "KEEP_REMOVED", 0.2)
    stores = PendingStores({}, {})
    stores.serve(lambda: None)
    while not stores.ready():
        time.sleep(0.01)  # torch's import, in the stores' thread
    listener = ports.bind_free("127.0.0.1", set())  # as the head binds it
    first = world("pair-1", listener.getsockname()[1])
    stores.add_world(first, [1, 1], listener)
    old = client(first.port)
    assert protocol.members(old, 0) == ["frontend", "worker-1"]
    stores.remove("pair-1", 0, "drained")
    assert protocol.removed(old, 0)
    listener = ports.bind_free("127.0.0.1", {first.port})
    again = world("pair-1", listener.getsockname()[1])
    stores.add_world(again, [1, 2], listener)  # worker-1's next start
    time.sleep(0.3)  # past the old one's KEEP_REMOVED
    stores.ready()
    new = client(again.port)
    assert protocol.admitted(new, 0, 2) == [1, 2] and not protocol.removed(new, 0)
    stores.mark_broken("pair-1", 0, "a member died")  # written to the new one, not the old
    assert protocol.broken_reason(new, 0) == "a member died"
    stores.close()
