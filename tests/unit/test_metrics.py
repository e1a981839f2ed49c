"""The metrics a scrape shows (head/observe/metrics.py), from a status document and
the head's readings; the topology's and the command line's metrics address."""

import json
import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mwrun.head.observe.calltimes import CallTimes
from mwrun.head.observe.downtimes import Downtimes, downtime
from mwrun.head.observe.metrics import Readings, families
from mwrun.plan.fields import listen_error
from mwrun.plan.topology import parse
from mwrun.protocol import CALL_TIME_BOUNDS
from tests.helpers import ROOT
from tests.unit.test_topology import minimal, one_problem

DOC = {
    "run_id": "r1", "name": "serve",
    "worlds": [{"name": "pair-0", "state": "healthy", "generation": 3, "breaks": 3,
                "members": ["frontend", "worker-0"], "size": 2,
                "slow": {"member": "worker-0", "lag_s": 0.02, "calls": 50,
                         "waits_s": {"frontend": 0.021, "worker-0": 0.001}}},
               {"name": "pair-1", "state": "broken", "generation": 1, "breaks": 1,
                "members": ["frontend", "worker-1"], "size": 2}],
    "processes": [{"name": "frontend", "state": "running", "restarts": 0, "pid": 11,
                   "cpu_percent": 50.0, "rss_bytes": 1000, "start": "warm"},
                  {"name": "worker-0", "state": "running", "restarts": 3, "pid": 12,
                   "cpu_percent": None, "rss_bytes": None, "start": "cold"},
                  {"name": "worker-1", "state": "restarting", "restarts": 1, "pid": None,
                   "cpu_percent": None, "rss_bytes": None, "start": None}],
    "scale": {"worker": {"desired": 3, "current": 2, "min": 1, "max": 8,
                         "draining": ["worker-2"]}},
}
def fault(world: str, **phases) -> dict:
    return {"event": "fault", "world": world,
            "phases": {"t_fault": None, "exit_seen": None, "survivors_told": None,
                       "restarted": None, "reformed": None, "first_call": None, **phases}}


def _at(row: list, counts: dict[int, int], seconds: float) -> list:
    return [counts.get(i, n) for i, n in enumerate(row[:-1])] + [seconds]


DOWNTIMES = Downtimes()
for record in (fault("pair-0", t_fault=100.0, reformed=100.04, first_call=100.06),
               fault("pair-0", exit_seen=200.0, reformed=201.0),  # no signal: from the exit
               fault("pair-0", t_fault=300.0, exit_seen=300.01),  # never back: not counted
               fault("pair-1", t_fault=400.0, first_call=1000.0)):  # past every bucket
    DOWNTIMES.fault(record)
TIMES = CallTimes()
_ROW = [0] * (len(CALL_TIME_BOUNDS) + 1) + [0.0]
TIMES.beat("frontend", 11, {"pair-0": {"recv": _at(_ROW, {3: 2}, 0.0012)}})
TIMES.beat("worker-0", 12, {"pair-0": {"send": _at(_ROW, {0: 5}, 0.0002)}})
TIMES.beat("worker-0", 13, {"pair-0": {"send": _at(_ROW, {len(CALL_TIME_BOUNDS): 1},
                                                     12.0)}})  # restarted: above all
READINGS = Readings(head_cpu_seconds=1.5, loop_lag_seconds=0.002,
                    calls={"pair-0": (120, 4800)}, restarts={"worker-0": (1, 2)},
                    bundles=4, operations={"scale": 2, "drain": 1},
                    downtimes=DOWNTIMES.worlds, call_times=TIMES.histograms())


class Fixed:
    def __init__(self, found):
        self.found = found

    def collect(self):
        return self.found


def scrape(doc=DOC, readings=READINGS) -> dict[tuple[str, tuple], float]:
    """What Prometheus would read: the exposition text made by prometheus_client,
    parsed back; (sample name, sorted labels) -> value."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(families(doc, readings)))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_world_is_in_one_state_and_its_counts_are_counters():
    got = scrape()
    states = {k[1]: v for k, v in got.items() if k[0] == "mwrun_world_state"
              and ("world", "pair-1") in k[1]}
    assert sum(states.values()) == 1
    assert states[(("state", "broken"), ("world", "pair-1"))] == 1
    assert got[("mwrun_world_generation", (("world", "pair-0"),))] == 3
    assert got[("mwrun_world_breaks_total", (("world", "pair-0"),))] == 3
    assert got[("mwrun_world_members", (("world", "pair-0"),))] == 2
    assert got[("mwrun_world_calls_total", (("world", "pair-0"),))] == 120
    assert got[("mwrun_world_bytes_total", (("world", "pair-0"),))] == 4800
    # a world no member told the traffic of shows no count rather than a false 0
    assert ("mwrun_world_calls_total", (("world", "pair-1"),)) not in got


def test_the_member_a_world_waits_for_is_a_gauge_of_its_lag():
    got = scrape()
    assert got[("mwrun_world_slow_member_lag_seconds",
                (("process", "worker-0"), ("world", "pair-0")))] == 0.02
    assert not any(name == "mwrun_world_slow_member_lag_seconds" and ("world", "pair-1") in labels
                   for name, labels in got)


def test_a_process_shows_its_state_restarts_by_cause_and_usage_in_base_units():
    got = scrape()
    assert got[("mwrun_process_state", (("process", "worker-1"), ("state", "restarting")))] == 1
    assert got[("mwrun_process_restarts_total", (("cause", "fault"), ("process", "worker-0")))] == 1
    assert got[("mwrun_process_restarts_total", (("cause", "drill"), ("process", "worker-0")))] == 2
    assert got[("mwrun_process_cpu_ratio", (("process", "frontend"),))] == 0.5
    assert got[("mwrun_process_resident_memory_bytes", (("process", "frontend"),))] == 1000
    assert got[("mwrun_process_start", (("process", "frontend"), ("start", "warm")))] == 1
    assert got[("mwrun_process_start", (("process", "worker-0"), ("start", "cold")))] == 1
    # a state it is not in has no series (Prometheus marks one left stale at once)
    assert ("mwrun_process_start", (("process", "worker-0"), ("start", "warm"))) not in got
    assert [labels for name, labels in got if name == "mwrun_process_state"
            and ("process", "worker-1") in labels] == [(("process", "worker-1"),
                                                        ("state", "restarting"))]
    # no reading: no sample (never a made-up 0)
    assert ("mwrun_process_cpu_ratio", (("process", "worker-0"),)) not in got


def test_scale_the_head_and_bundles():
    got = scrape()
    assert got[("mwrun_scale_desired_replicas", (("process", "worker"),))] == 3
    assert got[("mwrun_scale_running_replicas", (("process", "worker"),))] == 2
    assert got[("mwrun_scale_draining_replicas", (("process", "worker"),))] == 1
    assert got[("mwrun_scale_operations_total", (("operation", "scale"),))] == 2
    assert got[("mwrun_head_cpu_seconds_total", ())] == 1.5
    assert got[("mwrun_head_loop_lag_seconds", ())] == 0.002
    assert got[("mwrun_postmortem_bundles_total", ())] == 4
    assert got[("mwrun_run_info", (("name", "serve"), ("run_id", "r1")))] == 1


def test_labels_are_bounded_by_the_jobs_shape():
    names = {label for (_, labels) in scrape() for label, _ in labels}
    assert names <= {"world", "process", "state", "cause", "start", "operation", "run_id",
                     "name", "le"}  # never a pid, never a generation


@pytest.mark.parametrize("addr", ["127.0.0.1:9400", "0.0.0.0:1", "[::1]:65535",
                                  "metrics.example:9400"])
def test_a_listen_address_is_host_colon_port(addr):
    assert listen_error(addr) is None


@pytest.mark.parametrize("addr, says", [
    ("9400", "is not HOST:PORT"), ("127.0.0.1:", "is not HOST:PORT"),
    ("127.0.0.1:0", "a port from 1 to 65535"), ("127.0.0.1:70000", "is not HOST:PORT"),
    (":9400", "is not HOST:PORT"), ("::1:9400", "in brackets"),
])
def test_a_bad_listen_address_says_why(addr, says):
    assert says in listen_error(addr)


def test_the_topology_names_the_metrics_address():
    topo = parse(minimal(top="metrics: {addr: 127.0.0.1:9400}\n"), "t.yaml", "/base")
    assert topo.metrics == "127.0.0.1:9400"
    assert parse(minimal(), "t.yaml", "/base").metrics is None


@pytest.mark.parametrize("top, says", [
    ("metrics: {addr: 9400}\n", "metrics addr '9400' is not HOST:PORT"),
    ("metrics: {}\n", "give addr: HOST:PORT"),
    ("metrics: {addr: 127.0.0.1:9400, path: /m}\n", "path"),
])
def test_a_bad_metrics_entry_is_said_where_it_is(top, says):
    assert says in one_problem(minimal(top=top))


def test_a_faults_downtime_runs_from_the_fault_to_the_first_call_after_it():
    assert downtime(fault("w", t_fault=1.0, reformed=1.5, first_call=1.75)) == 0.75
    assert downtime(fault("w", exit_seen=2.0, reformed=2.5)) == 0.5
    assert downtime(fault("w", t_fault=1.0, exit_seen=1.1)) is None  # still down


def test_downtimes_are_a_histogram_per_world():
    got = scrape()
    bucket = {dict(labels)["le"]: v for (name, labels), v in got.items()
              if name == "mwrun_fault_downtime_seconds_bucket"
              and ("world", "pair-0") in labels}
    assert bucket["0.025"] == 0 and bucket["0.1"] == 1 and bucket["1.0"] == 2
    assert bucket["+Inf"] == 2
    assert got[("mwrun_fault_downtime_seconds_count", (("world", "pair-0"),))] == 2
    assert abs(got[("mwrun_fault_downtime_seconds_sum", (("world", "pair-0"),))] - 1.06) < 1e-9
    assert got[("mwrun_fault_downtime_seconds_bucket", (("le", "300.0"), ("world", "pair-1")))] \
        == 0
    assert got[("mwrun_fault_downtime_seconds_bucket", (("le", "+Inf"), ("world", "pair-1")))] \
        == 1


def test_call_times_are_a_histogram_per_world_and_operation_that_a_restart_keeps():
    got = scrape()
    send = (("operation", "send"), ("world", "pair-0"))
    # worker-0's first start counted five calls of 0.1 ms or less; its restart one of
    # 12 s (above every bound): both stay, and the count never goes back
    assert got[("mwrun_world_call_seconds_count", send)] == 6
    assert got[("mwrun_world_call_seconds_bucket", (("le", "0.0001"), *send))] == 5
    assert got[("mwrun_world_call_seconds_bucket", (("le", "10.0"), *send))] == 5
    assert abs(got[("mwrun_world_call_seconds_sum", send)] - 12.0002) < 1e-9
    recv = (("operation", "recv"), ("world", "pair-0"))
    assert got[("mwrun_world_call_seconds_bucket", (("le", "0.0005"), *recv))] == 0
    assert got[("mwrun_world_call_seconds_bucket", (("le", "0.001"), *recv))] == 2


def test_a_removed_world_forgets_its_call_times():
    times = CallTimes()
    times.beat("a", 1, {"w": {"barrier": _at(_ROW, {1: 1}, 0.0002)},
                        "v": {"barrier": _at(_ROW, {1: 1}, 0.0002)}})
    times.beat("a", 2, {"w": {"barrier": _at(_ROW, {1: 1}, 0.0002)}})  # carried: 2
    assert times.histograms()[("w", "barrier")][0][1] == 2
    times.forget("w")
    assert list(times.histograms()) == [("v", "barrier")]


def test_the_metrics_page_lists_every_metric_and_no_other():
    page = (ROOT / "docs" / "metrics.rst").read_text()
    listed = set(re.findall(r"^``(mwrun_\w+)``", page, flags=re.M))
    assert listed == {re.sub(r"_(bucket|sum|count)$", "", name) for name, _ in scrape()}


def test_the_dashboard_asks_for_documented_metrics_and_shows_every_one():
    """docs/grafana-dashboard.json is made of the real names: each query names only
    documented families, and each family but the run's info has a panel."""
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    page = (ROOT / "docs" / "metrics.rst").read_text()
    documented = set(re.findall(r"^``(mwrun_\w+)``", page, flags=re.M))
    used = set()
    for panel in dashboard["panels"]:
        assert panel["targets"] and panel["title"], panel
        for target in panel["targets"]:
            assert 'job=~"$job"' in target["expr"], target  # one job, or all of them
            for name in re.findall(r"mwrun_\w+", target["expr"]):
                family = re.sub(r"_(bucket|sum|count)$", "", name)
                assert family in documented, name
                used.add(family)
    assert used == documented - {"mwrun_run_info"}
    [job] = [v for v in dashboard["templating"]["list"] if v["name"] == "job"]
    assert "mwrun_run_info" in job["definition"]


def test_counts_are_there_from_the_start_at_zero():
    """A series that first appears at 1 shows no increase to rate() or increase(): a
    world's downtime histogram and an elastic job's operations are there from 0."""
    quiet = Readings(head_cpu_seconds=0.1, loop_lag_seconds=0.0, calls={}, restarts={},
                     bundles=0)
    got = scrape(DOC, quiet)
    for world in ("pair-0", "pair-1"):
        assert got[("mwrun_fault_downtime_seconds_count", (("world", world),))] == 0
    assert got[("mwrun_scale_operations_total", (("operation", "scale"),))] == 0
    assert got[("mwrun_scale_operations_total", (("operation", "drain"),))] == 0
    plain = scrape({**DOC, "scale": {}}, quiet)
    assert not any(name == "mwrun_scale_operations_total" for name, _ in plain)
