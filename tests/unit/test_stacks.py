"""``mwrun stacks``, its pure parts: the library's dump and the call each thread is in,
the order down the link and the answer up, the head's selection and asks, the command
line's waiting, wording and refusal of a finished run."""

import json
import threading
import time
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from mwrun import stacktext
from mwrun.cli import main, stacksview
from mwrun.head.decide.records import ProcessRecord, Worker
from mwrun.head.postmortem import stacks as head_stacks
from mwrun.head.serve import requests
from mwrun.head.serve.dispatcher import Dispatcher
from mwrun.head.serve.library import Library
from mwrun.head.serve.verbs import Verbs
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState, WorldState
from mwrun.worlds import inflight, orders, stacks
from mwrun.worlds.calls import Calls
from mwrun.worlds.supervisor_link import SupervisorLink
from tests.fakehead import FakeHead

pytestmark = pytest.mark.timeout(60)


# -- the library ----------------------------------------------------------------------------


def _blocked_thread(name: str):
    release, inside = threading.Event(), threading.Event()

    def body():
        inside.set()
        release.wait(30)

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    assert inside.wait(10)
    return thread, release


def test_the_dump_names_every_thread_its_stack_and_the_world_call_it_is_in():
    thread, release = _blocked_thread("sender")
    inflight.CALLS[thread.ident] = ("world1", "send", 100.0)
    try:
        told = stacks.dump(now=lambda: 103.25)
    finally:
        inflight.CALLS.pop(thread.ident, None)
        release.set()
    threads = told["threads"]
    assert threads[0]["main"] and threads[0]["name"] == "MainThread"  # the main one first
    sender = next(t for t in threads if t["name"] == "sender")
    assert sender["call"] == {"world": "world1", "call": "send", "for_s": 3.25}
    assert sender["daemon"] and sender["id"] == thread.ident
    assert [f[2] for f in sender["stack"]][-2:] == ["wait", "wait"]  # innermost last
    assert any(f[2] == "body" and "release.wait" in f[3] for f in sender["stack"])
    assert threads[0]["call"] is None
    json.dumps(told)  # one line to the head


def test_a_dump_too_big_for_one_line_keeps_each_thread_s_innermost_frames():
    frames = [[f"f{i}.py", i, f"fn{i}", "x" * 100] for i in range(64)]
    told = {"threads": [{"name": f"t{i}", "stack": frames} for i in range(40)]}
    fitted = stacks.fit(told, limit=40_000)
    assert len(json.dumps(fitted)) <= 40_000
    for thread in fitted["threads"]:
        assert thread["cut"] and thread["stack"][-1] == frames[-1]
    assert stacks.fit({"threads": [{"stack": frames[:2]}]}) == {"threads": [{"stack": frames[:2]}]}


def test_an_answer_that_cannot_be_read_says_why_and_never_ends_the_link_thread(monkeypatch):
    def broken(now=None):
        raise RuntimeError("a frame went away")
    monkeypatch.setattr(stacks, "dump", broken)
    told = stacks.told("worker-0", "ask-1")
    assert told["threads"] == [] and told["error"] == "RuntimeError: a frame went away"
    assert requests.problem(told) is None
    shown = stacktext.render([{"process": "worker-0", "pid": 4, "host": "h",
                                "answered": True, **told}])
    assert "its library could not read its stacks: RuntimeError: a frame went away" in shown


class _Group:
    def __init__(self):
        self.seen = []

    def send(self, tensors, peer, tag):
        self.seen.append(inflight.CALLS.get(threading.get_ident()))
        return SimpleNamespace(wait=lambda: self.seen.append(
            inflight.CALLS.get(threading.get_ident())))


def test_a_world_call_is_recorded_for_its_thread_while_it_runs_and_cleared_after():
    group = _Group()
    state = SimpleNamespace(generation=3, live=lambda: SimpleNamespace(group=group),
                            error=None, closed=False)
    counted = []
    calls = Calls("world1", "gloo", SimpleNamespace(state=state),
                  SimpleNamespace(answered=lambda n, g, started, call: counted.append(n)))
    tensor = SimpleNamespace(nbytes=8)
    calls._point(group.send, tensor, 1, False, "send")
    assert [s[:2] for s in group.seen] == [("world1", "send")] * 2  # issued and waited
    assert threading.get_ident() not in inflight.CALLS and counted == [8]

    def fails(tensors, peer, tag):
        raise ValueError("a caller's mistake")
    with pytest.raises(ValueError):
        calls._point(fails, tensor, 1, False, "recv")
    assert threading.get_ident() not in inflight.CALLS  # cleared on the way out too


def test_the_head_s_stacks_order_is_parsed_and_a_bad_one_ignored():
    assert orders.parse(b'{"verb": "stacks", "id": "a1"}') == orders.Stacks("a1")
    assert orders.parse(b'{"verb": "stacks", "id": 7}') is None
    assert orders.parse(b'{"verb": "stacks"}') is None


def test_the_link_thread_answers_stacks_while_the_main_thread_is_blocked(tmp_path):
    """The answer comes from the link's own thread: the thread that asked nothing (here
    one blocked in a world call) is shown where it waits, and is never interrupted."""
    head = FakeHead(str(tmp_path / "control.sock"))
    link = SupervisorLink(head.path, "worker-0", 5.0).start()
    thread, release = _blocked_thread("trainer")
    inflight.CALLS[thread.ident] = ("world1", "recv", time.monotonic())
    try:
        head.expect_verb("hello", process="worker-0")
        head.send("worker-0", {"verb": "stacks", "id": "ask-1"})
        told = head.expect_verb("stacks_told", id="ask-1")
        assert told["process"] == "worker-0" and requests.problem(told) is None
        trainer = next(t for t in told["threads"] if t["name"] == "trainer")
        assert trainer["call"]["world"] == "world1" and trainer["call"]["call"] == "recv"
        assert any(t["name"] == "mwrun-heartbeat" for t in told["threads"])
        assert thread.is_alive() and not release.is_set()
    finally:
        inflight.CALLS.pop(thread.ident, None)
        release.set()
        link.close()
        head.close()


# -- the request's fields ------------------------------------------------------------------


def test_stacks_requests_are_checked_whole():
    assert requests.problem({"verb": "stacks"}) is None
    assert requests.problem({"verb": "stacks", "world": "world1"}) is None
    assert requests.problem({"verb": "stacks", "processes": ["a", "b"]}) is None
    assert "processes" in requests.problem({"verb": "stacks", "processes": "a"})
    assert "processes" in requests.problem({"verb": "stacks", "processes": [""]})
    assert "needs 'id'" in requests.problem({"verb": "stacks_result"})
    told = {"verb": "stacks_told", "process": "p", "pid": 5, "id": "x", "threads": []}
    assert requests.problem(told) is None and requests.library(told)
    assert "threads" in requests.problem({**told, "threads": [1]})
    assert "pid" in requests.problem({**told, "pid": "5"})


# -- the head: who is asked, and what they told ----------------------------------------------


def _rec(name, state=P.RUNNING, pid=100, hello=True, beat=1.0, host="localhost"):
    rec = ProcessRecord(SimpleNamespace(name=name, host=host, worlds=()), state=state,
                        worker=Worker(pid=pid))
    rec.worker.said_hello, rec.worker.beat_every = hello, beat if hello else None
    return rec


def test_selection_is_a_world_s_members_the_processes_named_or_every_process():
    procs = {n: _rec(n) for n in ("leader", "worker-0", "worker-1")}
    worlds = {"world1": ["leader", "worker-0"]}
    select = head_stacks.select
    assert select(procs, worlds, "world1", []) == ["leader", "worker-0"]
    assert select(procs, worlds, None, ["worker-1", "leader", "worker-1"]) == \
        ["worker-1", "leader"]
    assert select(procs, worlds, None, []) == ["leader", "worker-0", "worker-1"]
    with pytest.raises(ValueError, match="no world 'w9'; worlds: world1"):
        select(procs, worlds, "w9", [])
    with pytest.raises(ValueError, match="no process 'wrk'; processes: leader, worker-0"):
        select(procs, worlds, None, ["wrk"])
    with pytest.raises(ValueError, match="not both"):
        select(procs, worlds, "world1", ["leader"])


def test_who_cannot_be_asked_is_named_with_why():
    assert head_stacks.unaskable(_rec("a")) is None
    assert head_stacks.unaskable(_rec("a", P.EXITED, None)) == "not running (it is exited)"
    assert "plain torch script" in head_stacks.unaskable(_rec("a", hello=False))
    assert "left its worlds" in head_stacks.unaskable(_rec("a", beat=None))
    assert head_stacks.unaskable(_rec("a", host="node2")) is None  # its agent relays


def test_an_ask_goes_down_to_each_library_and_keeps_what_each_tells():
    told, clock = [], [10.0]
    asks = head_stacks.Stacks(lambda p, m: told.append((p, m)), lambda: clock[0],
                              new_id=iter(f"id{i}" for i in range(100)).__next__)
    first = asks.ask([_rec("leader", pid=7), _rec("plain", hello=False, pid=8)])
    assert told == [("leader", {"verb": "stacks", "id": "id0"})]
    assert first["waiting"] == ["leader"]
    plain = first["members"][1]
    assert (plain["process"], plain["pid"], plain["answered"]) == ("plain", 8, False)
    assert "no library" in plain["reason"]
    asks.told("id0", "leader", 99, [{"name": "stale"}])  # another start of it: dropped
    assert asks.result("id0")["waiting"] == ["leader"]
    clock[0] = 10.5
    asks.told("id0", "leader", 7, [{"name": "MainThread"}])
    done = asks.result("id0")
    assert done["waiting"] == [] and done["age_s"] == 0.5
    assert done["members"][0]["threads"] == [{"name": "MainThread"}]
    assert done["members"][0]["told_after_s"] == 0.5 and done["members"][0]["answered"]
    clock[0] += head_stacks.UNREAD + 1
    asks.ask([])
    assert asks.result("id0") is None  # one no longer read went
    asks.told("id0", "leader", 7, [])  # an answer to it is dropped, not an error


# -- the command line ------------------------------------------------------------------------


def test_the_first_argument_is_the_run_only_when_a_run_folder_has_its_name():
    runs = {"star-1"}
    assert stacksview.split(("star-1", "leader"), runs.__contains__) == ("star-1", ["leader"])
    assert stacksview.split(("leader", "worker-0"), runs.__contains__) == \
        (None, ["leader", "worker-0"])
    assert stacksview.split((), runs.__contains__) == (None, [])


def test_the_command_looks_again_until_all_answered_or_the_deadline():
    clock, sent = [0.0], []
    answers = iter([{"id": "a", "waiting": ["x"]}, {"id": "a", "waiting": ["x"]},
                    {"id": "a", "waiting": []}])

    def ask(message):
        sent.append(message["verb"])
        return next(answers)

    def sleep(seconds):
        clock[0] += seconds

    done = stacksview.collect(ask, {"verb": "stacks"}, 2.0, lambda: clock[0], sleep)
    assert done["waiting"] == [] and sent == ["stacks", "stacks_result", "stacks_result"]
    clock[0], sent[:] = 0.0, []
    stuck = stacksview.collect(lambda m: sent.append(m) or {"id": "b", "waiting": ["y"]},
                               {"verb": "stacks"}, 1.0, lambda: clock[0], sleep)
    assert stuck["waiting"] == ["y"] and clock[0] == pytest.approx(1.0)
    assert len(sent) < 20  # it backs off


THREADS = [
    {"name": "MainThread", "main": True, "daemon": False,
     "call": {"world": "world1", "call": "recv", "for_s": 3.2},
     "stack": [["worker.py", 12, "<module>", "main()"],
               ["worker.py", 9, "main", "w.recv(t, 0)"]]},
    {"name": "mwrun-heartbeat", "main": False, "daemon": True, "call": None, "cut": True,
     "stack": [["supervisor_link.py", 190, "_run", "select.select(...)"]]},
]


def test_a_member_is_shown_with_its_call_and_every_thread_s_stack_or_why_it_told_nothing():
    answer = {"members": [
        {"process": "worker-0", "pid": 42, "host": "localhost", "state": P.RUNNING.value,
         "answered": True, "reason": None, "threads": THREADS},
        {"process": "leader", "pid": 41, "host": "localhost", "state": P.UNRESPONSIVE.value,
         "answered": False, "reason": None},
        {"process": "plain", "pid": 43, "host": "node2", "state": P.RUNNING.value,
         "answered": False, "reason": "no library: it never spoke to its supervisor"}]}
    members = stacksview.settled(answer, 2.0)
    assert "did not answer within 2s" in members[1]["reason"]
    assert "(it is unresponsive)" in members[1]["reason"]
    text = stacktext.render(members)
    assert "worker-0  pid 42 on localhost  in world1.recv for 3.2s  (2 threads)" in text
    assert "  Thread MainThread (main)  in world1.recv for 3.2s" in text
    assert '    File "worker.py", line 9, in main\n      w.recv(t, 0)' in text
    assert "  Thread mwrun-heartbeat (daemon)\n    ... (outer frames left out)" in text
    assert "leader  pid 41 on localhost  did not answer within 2s" in text
    assert "plain  pid 43 on node2  no library" in text


def test_a_member_s_call_is_its_main_thread_s_else_its_longest():
    other = {"name": "t", "call": {"world": "w2", "call": "barrier", "for_s": 9.0}}
    assert stacktext.member_call([*THREADS, other])["call"] == "recv"
    assert stacktext.member_call([THREADS[1], other])["call"] == "barrier"
    assert stacktext.call_text(stacktext.member_call([THREADS[1]])) == "in no world call"


def _finished_run(home, run_id="done-1"):
    run = home / "runs" / run_id
    run.mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({
        "run_id": run_id, "name": "done", "state": RunState.FINISHED.value,
        "supervisor_pid": None, "started_at": 1.0, "exit_code": 0,
        "processes": [{"name": "p", "host": "localhost", "pid": None,
                       "state": P.EXITED.value, "exit_code": 0, "restarts": 0,
                       "worlds": {"w": 0}}],
        "worlds": [{"name": "w", "state": WorldState.CLOSED.value, "generation": 0,
                    "breaks": 0, "backend": "gloo", "port": 29501, "members": ["p"]}]}))


def test_stacks_of_a_finished_run_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MWRUN_HOME", str(tmp_path))
    _finished_run(tmp_path)
    for args in (["stacks", "done-1"], ["stacks", "done-1", "p"], ["stacks"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output
    named = CliRunner().invoke(main, ["stacks", "done-1"])
    assert "Error: run done-1 is not running (it is finished)" in named.output
    assert "no live run" in CliRunner().invoke(main, ["stacks"]).output


def test_stacks_refuses_a_world_and_processes_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MWRUN_HOME", str(tmp_path))
    result = CliRunner().invoke(main, ["stacks", "leader", "--world", "world1"])
    assert result.exit_code == 2 and "not both" in result.output


def test_the_control_verbs_ask_keep_and_read_back_an_ask():
    """stacks -> an ask (down each link); stacks_told from a library -> kept, no reply;
    stacks_result -> the ask with what was told; names that do not exist are refused."""
    down = []
    procs = {"leader": _rec("leader", pid=7), "worker-0": _rec("worker-0", pid=8)}
    worlds = {"world1": SimpleNamespace(plan=SimpleNamespace(members=["leader", "worker-0"]))}
    sup = SimpleNamespace(procs=procs, worlds=worlds)
    asks = head_stacks.Stacks(lambda p, m: down.append((p, m)), time.monotonic)
    verbs = Verbs(sup, None, None, None, None, asks, lambda fresh: {}, time.monotonic)
    library = Library(None, None, None, None, None, asks, None, lambda name, t: t,
                      time.monotonic)
    control = Dispatcher(verbs, library, lambda name: False)  # every pid known

    def serve(message):
        return control.serve(json.dumps(message).encode())

    refused = serve({"verb": "stacks", "processes": ["wrk"]})
    assert refused == {"ok": False, "error": "no process 'wrk'; processes: leader, worker-0"}
    assert not serve({"verb": "stacks", "world": "w9"})["ok"] and down == []
    asked = serve({"verb": "stacks", "world": "world1"})
    assert asked["ok"] and asked["waiting"] == ["leader", "worker-0"]
    assert down == [(n, {"verb": "stacks", "id": asked["id"]}) for n in ("leader", "worker-0")]
    told = {"verb": "stacks_told", "process": "worker-0", "pid": 8, "id": asked["id"],
            "threads": [{"name": "MainThread", "main": True}]}
    assert serve(told) is None
    assert serve({**told, "threads": "junk"}) is None  # a malformed answer: ignored
    now = serve({"verb": "stacks_result", "id": asked["id"]})
    assert now["ok"] and now["waiting"] == ["leader"]
    assert now["members"][1]["threads"] == [{"name": "MainThread", "main": True}]
    assert "too old" in serve({"verb": "stacks_result", "id": "gone"})["error"]
