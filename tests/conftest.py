import pytest

from tests.helpers import Proc, assert_gone


@pytest.fixture
def procs():
    """Start processes with procs.start(args); all are killed and checked gone after."""

    class Started(list):
        def start(self, args, **kwargs) -> Proc:
            proc = Proc(args, **kwargs)
            self.append(proc)
            return proc

    started = Started()
    yield started
    for proc in started:
        proc.kill_group()
    for proc in started:
        proc.close()
    assert_gone([p.pid for p in started])
