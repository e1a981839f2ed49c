"""Every control request is checked before it reaches the supervisor: a malformed one
is refused (or, for the verbs that get no reply, ignored) and changes nothing."""

import json

import pytest

from mwrun import protocol
from mwrun.head.serve import requests
from mwrun.head.serve.dispatcher import Dispatcher
from mwrun.head.serve.library import Library
from mwrun.head.serve.verbs import Verbs

GOOD = {
    "status": {},
    "stop": {"force": True},
    "kill_world": {"world": "world1", "rank": 1, "signal": "KILL"},
    "drill": {"summary": {"worlds": {"world1": {"faults": 1}}, "kept_others": 0.99}},
    "hello": {"process": "leader", "pid": 42, "interval": 1.0},
    "heartbeat": {"process": "leader", "pid": 42, "first_calls": {"world1": [1, 1.8e9]}},
    "bye": {"process": "leader", "pid": 42},
    "world": {"process": "leader", "pid": 42, "world": "world1", "generation": 0,
              "event": "ready", "reason": "", "t": 1.8e9},
}
WRONG = [["x"], {"a": 1}, None, True, 1.5, "", -3, float("nan"), 10**30]


class Recorder:
    """Stands in for every part the verbs act on: records every call that would reach
    the supervisor."""

    def __init__(self):
        self.calls = []
        self.stopping = False  # the supervisor's: a stop asked for the first time
        self.drills = self  # (supervisor.drills: kill_world)

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append((name, args)) or []

    def awaits_pid(self, name):
        return False  # every process's pid is known (early.py: held otherwise)

    def document(self, fresh_usage=False):
        self.calls.append(("document", ()))
        return {}


class Control:
    """The dispatcher over verbs whose every part is one Recorder (``calls``)."""

    def __init__(self):
        rec = self.recorder = Recorder()
        self.calls = rec.calls
        verbs = Verbs(rec, rec, rec, rec, rec, rec, rec.document, lambda: 0.0)
        library = Library(rec, rec, rec, rec, rec, rec, rec, rec.host_time, lambda: 0.0)
        self.dispatcher = Dispatcher(verbs, library, rec.awaits_pid)


def cases():
    for verb, fields in GOOD.items():
        for field in fields:
            for value in WRONG:
                if requests.FIELDS[verb][field][0](value):
                    continue  # a right value of another shape (None for rank)
                yield verb, field, value


@pytest.mark.parametrize("verb", list(GOOD))
def test_a_well_formed_request_reaches_the_supervisor(verb):
    control = Control()
    reply = control.dispatcher.serve(json.dumps({"verb": verb, **GOOD[verb]}).encode())
    assert requests.problem({"verb": verb, **GOOD[verb]}) is None
    assert control.calls
    assert (reply is None) == (verb in protocol.NO_REPLY)


@pytest.mark.parametrize(("verb", "field", "value"), list(cases()))
def test_a_wrong_field_is_refused_and_changes_nothing(verb, field, value):
    control = Control()
    line = json.dumps({"verb": verb, **GOOD[verb], field: value}).encode()
    reply = control.dispatcher.serve(line)
    assert control.calls == []
    if verb in protocol.NO_REPLY:
        assert reply is None
    else:
        assert reply["ok"] is False and repr(field) in reply["error"]


@pytest.mark.parametrize("line", [
    b'{"verb": ["status"]}', b'{"verb": {"a": 1}}', b'{"verb": null}', b'{"verb": 7}',
    b'{"nothing": 1}', b'[1, 2]', b'"status"', b'not json', b'{"verb": "status"',
    b"[" * 100000, b'{"verb": "world", "process": "leader"}',
    b'{"verb": "kill_world"}', b'\xff\xfe'])
def test_malformed_lines_get_an_error_and_change_nothing(line):
    control = Control()
    reply = control.dispatcher.serve(line)
    assert control.calls == []
    if reply is not None:  # world without its fields: ignored, it gets no reply
        assert reply["ok"] is False and reply["error"]
    else:
        assert b'"world"' in line


_N = len(protocol.CALL_TIME_BOUNDS) + 1  # the buckets and the count above them
_ROW = [0] * _N + [0.5]


@pytest.mark.parametrize("times", [
    [], {"w": []}, {"w": {"send": [0] * _N}}, {"w": {"send": [0] * (_N - 1) + [-1, 0.5]}},
    {"w": {"send": [0] * _N + [float("nan")]}},
    {"w": {"send": [0] * (_N - 1) + [0.5, 0.5]}},
    {"": {"send": _ROW}}, {"w": {"": _ROW}}, {"w": {"x" * 65: _ROW}},
    {"w": {f"op{i}": _ROW for i in range(33)}}])
def test_a_heartbeat_with_malformed_call_times_is_refused(times):
    """A beat's ``times`` reach the head's histograms (observe/calltimes.py) whole or
    not at all: a wrong shape would make a scrape fail, or a count go back."""
    assert requests.problem({"verb": "heartbeat", "process": "leader", "pid": 42,
                             "times": {"w": {"send": _ROW}}}) is None
    assert requests.problem({"verb": "heartbeat", "process": "leader", "pid": 42,
                             "times": times}) is not None


@pytest.mark.parametrize("fields, good", [
    ({"delay": 0.02, "for": 30}, True), ({"delay": 10, "for": 86400}, True),
    ({"delay": 0}, False), ({"delay": 10.5}, False), ({"delay": "0.1"}, False),
    ({"for": 0}, False), ({"for": 86401}, False), ({"delay": float("inf")}, False),
    ({"delay": True}, False)])
def test_a_slow_member_drill_is_bounded(fields, good):
    request = {"verb": "kill_world", "world": "w", "signal": "SLOW", **fields}
    assert (requests.problem(request) is None) is good


def test_a_required_field_missing_is_named():
    assert requests.problem({"verb": "kill_world"}) == "bad request: kill_world needs 'world'"
    assert requests.problem({"verb": ["status"]}).startswith('unknown verb ["status"]')


@pytest.mark.parametrize("request_", [
    {"verb": "hello", "process": ["leader"], "pid": 42, "interval": 1.0},
    {"verb": "heartbeat", "process": "leader", "pid": "42"},
    {"verb": "world", "process": "leader"},
    {"verb": "stop"}, {"verb": "kill_world", "world": "world1"}, {"verb": "status"},
    ["hello"], None])
def test_a_relayed_request_is_checked_like_a_local_one_and_only_the_librarys(request_):
    """What an agent relays from its host's processes: malformed, or a verb that is not
    the library's, it changes nothing."""
    control = Control()
    control.dispatcher.relayed(request_)
    assert control.calls == []


def test_a_well_formed_relayed_heartbeat_reaches_the_supervisor():
    control = Control()
    control.dispatcher.relayed({"verb": "heartbeat", "process": "leader", "pid": 42})
    assert control.calls == [("on_heartbeat", ("leader", 42, None, None))]
    control = Control()  # with when its next beat is due (worlds/supervisor_link.next_beat)
    control.dispatcher.relayed({"verb": "heartbeat", "process": "leader", "pid": 42, "next": 1.0})
    assert control.calls == [("on_heartbeat", ("leader", 42, 1.0, None))]
    control = Control()  # and how long its agent held it at most (host/relay.py)
    control.dispatcher.relayed({"verb": "heartbeat", "process": "leader", "pid": 42, "next": 1.0,
                                "hold": 0.25})
    assert control.calls == [("on_heartbeat", ("leader", 42, 1.0, 0.25))]


def test_the_times_a_member_tells_reach_the_faults_on_the_heads_clock():
    """A world's first call in a generation (heartbeat) and a member's join (world
    event) are the phases the library tells (head/faults.py)."""
    control = Control()
    control.dispatcher.serve(json.dumps({"verb": "heartbeat", **GOOD["heartbeat"]}).encode())
    control.dispatcher.serve(json.dumps({"verb": "world", **GOOD["world"]}).encode())
    names = [name for name, _ in control.calls]
    assert names == ["on_heartbeat", "host_time", "first_call", "first_call", "host_time",
                     "joined", "on_world_event"]
    assert control.calls[1] == ("host_time", ("leader", 1.8e9))
    assert control.calls[2][1][:2] == ("world1", 1)
    bad = {**GOOD["heartbeat"], "first_calls": {"world1": [1, "soon"]}}
    assert requests.problem({"verb": "heartbeat", **bad}) is not None


def test_a_drill_summary_must_be_a_bounded_object_that_keeps_the_records_meaning():
    for summary in ({"t": 1.0}, {"event": "stop"}, {"x": "y" * requests.MAX_SUMMARY}):
        assert "'summary'" in requests.problem({"verb": "drill", "summary": summary})
    assert requests.problem({"verb": "drill", "summary": {"kept": float("nan")}})


def test_every_checked_verb_has_its_method_and_no_other_is_served():
    """The dispatcher's table (the operator's verbs and the library's) holds exactly the
    verbs requests.py checks: none is checked and then unknown, none served unchecked."""
    assert sorted(Control().dispatcher.verbs) == sorted(requests.FIELDS)
    assert Control().dispatcher.serve(b'{"verb": "handle_stop"}')["ok"] is False
