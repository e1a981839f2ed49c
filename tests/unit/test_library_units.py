import json
from datetime import timedelta
from typing import ClassVar

import pytest

from mwrun import protocol
from mwrun.errors import BrokenWorldError, MwrunError
from mwrun.worlds import backends
from mwrun.worlds.failures import summarize
from mwrun.worlds.job import beat_interval
from mwrun.worlds.worldspec import WorldSpec, from_environment


class FakeStore:
    """The subset of torch's Store the protocol uses, over a dict."""

    def __init__(self):
        self.data = {}

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.data[key]

    def check(self, keys):
        return all(k in self.data for k in keys)

    def compare_set(self, key, expected, desired):
        current = self.data.get(key)
        if (current is None and expected == "") or current == expected.encode():
            self.data[key] = desired.encode()
        return self.data[key]

    def multi_set(self, keys, values):
        for k, v in zip(keys, values, strict=True):
            self.set(k, v)

    def wait(self, keys, timeout):
        assert isinstance(timeout, timedelta)
        if not self.check(keys):
            raise TimeoutError(f"wait timeout: {keys}")


def test_world_spec_checks_its_fields():
    assert WorldSpec(rank=1, size=2).hosts_store is False
    assert WorldSpec(rank=0, size=2).hosts_store is True
    assert WorldSpec(rank=0, size=2, host_store=False).hosts_store is False
    for kwargs, message in [({"rank": 2, "size": 2}, "rank must be in 0..1"),
                            ({"rank": 0, "size": 0}, "size must be"),
                            ({"rank": 0, "size": 1, "backend": "mpi"}, "backend must be one of"),
                            ({"rank": 0, "size": 1, "port": 0}, "port must be in"),
                            ({"rank": 0, "size": 1, "timeout": 0}, "timeout must be more")]:
        with pytest.raises(MwrunError, match=message):
            WorldSpec(**kwargs)


def test_worlds_from_environment():
    env = {"MWRUN_WORLDS": json.dumps({
        "world1": {"rank": 0, "size": 2, "backend": "gloo", "addr": "127.0.0.1", "port": 29501,
                   "generation": 3, "timeout": 7.0}})}
    specs = from_environment(env)
    assert specs["world1"] == WorldSpec(rank=0, size=2, addr="127.0.0.1", port=29501,
                                        backend="gloo", timeout=7.0, generation=3,
                                        host_store=False)
    assert specs["world1"].hosts_store is False  # under the launcher the supervisor hosts
    assert specs["world1"].rejoin is None  # no deadline given: rejoin() waits until it re-forms
    given = json.loads(env["MWRUN_WORLDS"])
    given["world1"]["rejoin"] = 150.0  # the plan's, above every member's hang_timeout
    assert from_environment({"MWRUN_WORLDS": json.dumps(given)})["world1"].rejoin == 150.0
    with pytest.raises(MwrunError, match="start this script with 'mwrun launch'"):
        from_environment({})
    with pytest.raises(MwrunError, match="MWRUN_WORLDS is malformed"):
        from_environment({"MWRUN_WORLDS": '{"w": {"rank": 0}}'})


def test_summarize_backend_errors():
    gloo = RuntimeError("[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
                        "Connection closed by peer [127.0.0.1]:5555. This is typically caused "
                        "by a remote worker crashing.")
    assert summarize(gloo) == "Connection closed by peer [127.0.0.1]:5555"
    assert summarize(RuntimeError("Application timeout caused pair closure")) == \
        "a call timed out waiting for a peer (the world's timeout)"
    assert summarize(RuntimeError("[x.cc:1] Timed out waiting 2000ms for recv")) == \
        "a call timed out waiting for a peer (the world's timeout)"


def test_protocol_generations_and_breaks():
    store = FakeStore()
    protocol.start(store)
    assert store.get(protocol.GEN) == b"0"
    assert protocol.broken_reason(store, 0) is None
    assert protocol.mark_broken(store, 0, 3, "worker-0 exited") == "worker-0 exited"
    # the first reason wins; later ones are told which
    assert protocol.mark_broken(store, 0, 3, "rank 1: connection closed") == "worker-0 exited"
    assert protocol.broken_reason(store, 0) == "worker-0 exited"
    for rank in range(3):  # every watcher and every member still forming wakes
        assert store.check([protocol.wake_key(0, rank), protocol.key(0, f"arrive/{rank}")])
    protocol.open_next(store, 0)
    assert store.get(protocol.GEN) == b"1"
    assert store.get(protocol.key(0, "next")) == b"open"
    protocol.close(store, 1, 2, "worker-0 has no restarts left")
    assert store.get(protocol.key(1, "next")).decode() == "closed: worker-0 has no restarts left"
    assert protocol.broken_reason(store, 1) == "worker-0 has no restarts left"
    assert protocol.wait_value(store, protocol.GEN, 1.0) == "1"
    assert protocol.pg_prefix(4) == "mwrun/g4/pg/"
    assert not protocol.ended(store, 1)  # closed after a failure: it did not just end


def test_protocol_normal_ends_and_a_leaving_store_host():
    store = FakeStore()
    protocol.start(store)
    # a member finished: the world closes, and says it ended
    protocol.close(store, 0, 2, "worker-0 exited normally and will not restart", ended=True)
    assert protocol.ended(store, 0)
    # by hand, rank 0 leaves with its store: every watcher wakes and reads who left
    protocol.open_next(store, 0)
    assert protocol.host_left(store, 1) is None
    protocol.host_leaves(store, 1, 3, 0)
    assert protocol.host_left(store, 1) == 0
    assert protocol.broken_reason(store, 1) == "its store host, rank 0, has gone"
    assert store.get(protocol.key(1, "next")).decode() == \
        "closed: its store host, rank 0, has gone"
    assert all(store.check([protocol.wake_key(1, r)]) for r in range(3))
    keys = protocol.heard_keys(1, 3, 0)  # whose reading it waits for: the others'
    assert keys == [protocol.key(1, "heard/1"), protocol.key(1, "heard/2")]
    for rank in (1, 2):
        protocol.heard(store, 1, rank)
    assert store.check(keys)


@pytest.fixture(autouse=True)
def _own_environment(monkeypatch):
    """backends.nccl sets torch's NCCL variables in os.environ: undone after each test."""
    import os

    monkeypatch.setattr(os, "environ", os.environ.copy())


class FakeNCCL:
    made: ClassVar[list] = []

    class Options:
        pass

    def __init__(self, store, rank, size, options):
        self.args = (store, rank, size)
        self.options = options
        self.calls = []
        FakeNCCL.made.append(self)

    def eager_connect_single_device(self, device):
        self.calls.append(("eager", device))

    def abort(self):
        self.calls.append(("abort",))


class FakeTorch:
    def __init__(self, gpus):
        self.set_to = None
        outer = self

        class cuda:  # mimics torch.cuda
            @staticmethod
            def is_available():
                return gpus > 0

            @staticmethod
            def device_count():
                return gpus

            @staticmethod
            def set_device(device):
                outer.set_to = device

        self.cuda = cuda

    @staticmethod
    def device(kind, index):
        return f"{kind}:{index}"


def test_nccl_pins_the_device_connects_eagerly_and_aborts_on_break():
    fake_torch = FakeTorch(gpus=1)
    c10d = type("c10d", (), {"ProcessGroupNCCL": FakeNCCL})
    device = backends.nccl_device(fake_torch)
    assert device == "cuda:0"  # the first visible GPU: CUDA_VISIBLE_DEVICES pins it
    made = backends.nccl("store", 1, 2, 7.5, device, c10d=c10d, torch_module=fake_torch)
    group = FakeNCCL.made[-1]
    assert fake_torch.set_to == "cuda:0"
    assert group.options._timeout == timedelta(seconds=7.5)
    assert group.calls == [("eager", "cuda:0")]
    assert made.device == "cuda:0" and made.name == "nccl"
    made.abort()
    assert group.calls[-1] == ("abort",)


def test_nccl_defaults_to_the_first_visible_gpu():
    fake_torch = FakeTorch(gpus=2)
    c10d = type("c10d", (), {"ProcessGroupNCCL": FakeNCCL})
    made = backends.nccl("store", 0, 2, 5.0, None, c10d=c10d, torch_module=fake_torch)
    assert made.device == "cuda:0" and fake_torch.set_to == "cuda:0"
    assert FakeNCCL.made[-1].calls == [("eager", "cuda:0")]


def test_nccl_errors_are_clear():
    with pytest.raises(MwrunError, match="needs a GPU"):
        backends.nccl_device(FakeTorch(gpus=0))
    with pytest.raises(MwrunError, match="GPU 1 is not visible"):
        backends.nccl_device(FakeTorch(gpus=1), 1)
    with pytest.raises(MwrunError, match="this torch build has no NCCL"):
        backends.nccl("store", 0, 1, 1.0, "cuda:0", c10d=object(), torch_module=FakeTorch(1))


def test_broken_world_error_carries_its_fields_and_pickles():
    import pickle

    error = pickle.loads(pickle.dumps(BrokenWorldError("w1", 2, "worker-0 exited")))
    assert (error.world, error.generation, error.reason) == ("w1", 2, "worker-0 exited")
    assert isinstance(error, RuntimeError)
    assert str(error) == "world 'w1' (generation 2) is broken: worker-0 exited"


def test_the_library_beats_five_times_per_hang_deadline():
    assert beat_interval(30.0, "90") == 5.0  # at most one beat per 5 s
    assert beat_interval(30.0, "2") == 0.4  # a short hang deadline: beat faster
    assert beat_interval(1.0, "60") == 0.2  # as before: five beats per call timeout
    assert beat_interval(30.0, None) == beat_interval(30.0, "nonsense") == 5.0


class FakeGloo:
    """ProcessGroupGloo's surface that backends.gloo touches, with an abort() of its own."""

    aborted = 0

    class _Options:
        pass

    @staticmethod
    def create_device(hostname):
        return f"device@{hostname}"

    def __init__(self, store, rank, size, options):
        self.options = options

    def abort(self):
        FakeGloo.aborted += 1


def test_gloo_prefers_torchs_own_abort_where_it_works(monkeypatch):
    c10d = type("c10d", (), {"ProcessGroupGloo": FakeGloo})
    monkeypatch.setattr(backends, "GLOO_ABORT_WORKS_SINCE", (2, 0))
    assert backends.native_gloo_abort_works("2.13.0+cpu")
    made = backends.gloo("store", 0, 2, 5.0, "127.0.0.1", c10d=c10d)
    made.abort()
    assert FakeGloo.aborted == 1
    monkeypatch.setattr(backends, "GLOO_ABORT_WORKS_SINCE", (2, 14))
    assert not backends.native_gloo_abort_works("2.13.0+cpu")
    assert backends.native_gloo_abort_works("2.14.0")



def test_finish_waits_for_a_thread_another_thread_is_starting():
    # Seen at exit: a group's release thread registered but not started yet, and
    # joining it raised "cannot join thread before it is started".
    import threading

    from mwrun.worlds.interruptible import finish

    done = threading.Event()
    worker = threading.Thread(target=done.set)
    starter = threading.Timer(0.05, worker.start)
    starter.start()
    finish({worker}, timeout=5.0)
    assert done.is_set()
    starter.join()


def test_mwrun_threads_leave_ctrl_c_to_the_main_thread():
    import signal
    import threading

    from mwrun.worlds import signals

    def mask() -> set:
        return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))

    seen = {}

    def run():
        seen["own"] = mask()
        inner = threading.Thread(target=lambda: seen.setdefault("child", mask()))
        inner.start()  # a thread it starts (as torch's C++ ones) inherits its mask
        inner.join()
        with signals.blocked_off_main():
            seen["off_main"] = mask()

    before = mask()
    signals.start(threading.Thread(target=run)).join()
    assert signal.SIGINT not in before and mask() == before  # the main thread keeps them
    assert {signal.SIGINT, signal.SIGTERM} <= seen["own"]
    assert signal.SIGINT in seen["child"] and signal.SIGINT in seen["off_main"]
    with signals.blocked_off_main():
        assert signal.SIGINT not in mask()  # the main thread's waits must hear Ctrl-C


def test_a_recorded_break_is_the_cause_not_a_member_that_left_after_it():
    # A drill marks generation 0 broken; one survivor sees it, ends and closes the world;
    # a slower peer's failed call must still say "drill", not that rank 1 left.
    from mwrun.worlds.reasons import agreed

    def said(store, mine):
        found = agreed(store, 0, 3, mine, process=None, supervised=False, by_a_peer=False)
        return found.reason, found.left

    store = FakeStore()
    protocol.mark_broken(store, 0, 3, "drill")
    protocol.leave(store, 0, 1)
    assert said(store, "rank 2 lost its connection") == ("drill", ())
    fresh = FakeStore()  # with no break recorded, the member that left is the reason
    protocol.leave(fresh, 0, 1)
    assert said(fresh, "mine") == ("rank 1 left the world (it closed it)", (1,))
