"""The run as Prometheus metrics: the families a scrape shows, made from the status
document and the head's own readings of the same moment (serve/scrapes.py takes both
in the loop's thread and hands them to the scrape's).

Pure: a document and its ``Readings`` in, ``prometheus_client`` metric families out;
the exposition text is prometheus_client's, never ours. Names follow Prometheus'
conventions: the ``mwrun_`` prefix, base units (seconds, bytes, ratios), ``_total`` for
counters. Label values are bounded by the job's shape: a world, a process, a state, a
cause, an operation; never a pid or a generation (a generation is a value).

A state is a gauge of value 1 labelled with the state it is in, and no series for the
states it is not in (``sum by (state)`` counts processes per state, an alert fires on
``mwrun_world_state{state="broken"} == 1``, and the series of a state left goes stale
at the next scrape). One series per state, most of them 0, made a scrape of 128
processes half again as long, for nothing a query needs. Counters never go back
within a run: breaks and restarts are the records' counts, calls and bytes the
traffic's totals, which carry an incarnation's count past its restart
(observe/traffic.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import psutil
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from mwrun.head.decide.records import ProcessRecord
from mwrun.head.observe.downtimes import BUCKETS, Downtimes
from mwrun.protocol import CALL_TIME_BOUNDS

OPERATIONS = ("drain", "scale")  # what ``mwrun scale``, ``drain`` and ``job.scale`` begin


@dataclass(frozen=True)
class Readings:
    """What the head reads of itself and its records for a scrape, beside the document."""

    head_cpu_seconds: float
    loop_lag_seconds: float  # how late the loop's last turn timer fired
    calls: Mapping[str, tuple[int, int]]  # world -> (calls, bytes) since the run started
    restarts: Mapping[str, tuple[int, int]]  # process -> (after faults, after drills)
    bundles: int  # post-mortem bundles written in this run
    operations: Mapping[str, int] = field(default_factory=dict)  # operation -> begun
    downtimes: Mapping[str, tuple[list[int], float]] = field(default_factory=dict)
    # (world, operation) -> (count per bucket of CALL_TIME_BOUNDS and above, seconds)
    call_times: Mapping[tuple[str, str], tuple[list[int], float]] = \
        field(default_factory=dict)


def families(doc: dict, readings: Readings) -> list[Metric]:
    """Every family of one scrape."""
    return [*_run(doc, readings), *_worlds(doc, readings), _downtime(doc, readings),
            _call_times(readings), *_processes(doc, readings), *_scale(doc, readings)]


def _downtime(doc: dict, readings: Readings) -> Metric:
    """Every world's, zero until its first fault closes: a series that first appears
    at 1 shows no increase to ``rate()`` (nor does a counter: every count here is
    there from the start, at 0)."""
    found = HistogramMetricFamily(
        "mwrun_fault_downtime_seconds", "Each fault's downtime: from the fault to the"
        " world's first call after it re-formed", labels=["world"])
    worlds = {w["name"]: ([0] * (len(BUCKETS) + 1), 0.0) for w in doc["worlds"]}
    for world, (counts, total) in sorted({**worlds, **readings.downtimes}.items()):
        found.add_metric([world], _cumulative(BUCKETS, counts), total)
    return found


def _call_times(readings: Readings) -> Metric:
    found = HistogramMetricFamily(
        "mwrun_world_call_seconds", "How long each member's blocking calls took, by"
        " operation (a recv: until its peer answered)", labels=["world", "operation"])
    for (world, op), (counts, total) in sorted(readings.call_times.items()):
        found.add_metric([world, op], _cumulative(CALL_TIME_BOUNDS, counts), total)
    return found


def _cumulative(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, int]]:
    """Prometheus' buckets (each counts every observation at or below it) of counts
    per bucket of ``bounds`` and above them."""
    cumulative, buckets = 0, []
    for le, count in zip([*map(str, bounds), "+Inf"], counts, strict=True):
        cumulative += count
        buckets.append((le, cumulative))
    return buckets


def _run(doc: dict, readings: Readings) -> Iterable[Metric]:
    info = GaugeMetricFamily("mwrun_run_info", "The run: its id and the topology's name",
                             labels=["run_id", "name"])
    info.add_metric([doc["run_id"], doc["name"]], 1)
    cpu = CounterMetricFamily("mwrun_head_cpu_seconds",
                              "CPU time the head (mwrun launch) has used, user and system")
    cpu.add_metric([], readings.head_cpu_seconds)
    lag = GaugeMetricFamily("mwrun_head_loop_lag_seconds",
                            "How late the head's loop ran its last periodic turn")
    lag.add_metric([], readings.loop_lag_seconds)
    bundles = CounterMetricFamily("mwrun_postmortem_bundles",
                                  "Post-mortem bundles written (one per world break)")
    bundles.add_metric([], readings.bundles)
    return info, cpu, lag, bundles


def _worlds(doc: dict, readings: Readings) -> Iterable[Metric]:
    state = GaugeMetricFamily("mwrun_world_state", "1 for the state each world is in",
                              labels=["world", "state"])
    generation = GaugeMetricFamily("mwrun_world_generation",
                                   "The world's generation (it grows by one per re-form)",
                                   labels=["world"])
    members = GaugeMetricFamily("mwrun_world_members", "Members of the world",
                                labels=["world"])
    breaks = CounterMetricFamily("mwrun_world_breaks", "Times the world broke",
                                 labels=["world"])
    calls = CounterMetricFamily("mwrun_world_calls",
                                "Calls the world carried (its busiest member's count)",
                                labels=["world"])
    sent = CounterMetricFamily("mwrun_world_bytes",
                               "Bytes the world carried (its busiest member's count)",
                               labels=["world"])
    slow = GaugeMetricFamily("mwrun_world_slow_member_lag_seconds",
                             "The member its world waits for, while one clearly is: how much"
                             " longer per collective its least-waiting peer waits",
                             labels=["world", "process"])
    for world in doc["worlds"]:
        name = world["name"]
        if world.get("slow"):
            slow.add_metric([name, world["slow"]["member"]], world["slow"]["lag_s"])
        state.add_metric([name, world["state"]], 1.0)
        generation.add_metric([name], world["generation"])
        members.add_metric([name], len(world["members"]))
        breaks.add_metric([name], world["breaks"])
        if name in readings.calls:
            count, nbytes = readings.calls[name]
            calls.add_metric([name], count)
            sent.add_metric([name], nbytes)
    return state, generation, members, breaks, calls, sent, slow


def _processes(doc: dict, readings: Readings) -> Iterable[Metric]:
    state = GaugeMetricFamily("mwrun_process_state", "1 for the state each process is in",
                              labels=["process", "state"])
    restarts = CounterMetricFamily(
        "mwrun_process_restarts", "Restarts of the process, by cause: after a fault (they"
        " spend max_restarts) or after a drill's fault (they do not)",
        labels=["process", "cause"])
    cpu = GaugeMetricFamily("mwrun_process_cpu_ratio",
                            "CPU the process uses, in cores (1.0: one core busy)",
                            labels=["process"])
    memory = GaugeMetricFamily("mwrun_process_resident_memory_bytes",
                               "Resident memory of the process", labels=["process"])
    start = GaugeMetricFamily("mwrun_process_start", "1 for how the process last started"
                              " (warm: forked from its host's zygote)",
                              labels=["process", "start"])
    for proc in doc["processes"]:
        name = proc["name"]
        state.add_metric([name, proc["state"]], 1.0)
        faults, drills = readings.restarts.get(name, (proc["restarts"], 0))
        restarts.add_metric([name, "fault"], faults)
        restarts.add_metric([name, "drill"], drills)
        if proc["cpu_percent"] is not None:
            cpu.add_metric([name], proc["cpu_percent"] / 100.0)
        if proc["rss_bytes"] is not None:
            memory.add_metric([name], proc["rss_bytes"])
        if proc["start"] is not None:
            start.add_metric([name, proc["start"]], 1.0)
    return state, restarts, cpu, memory, start


def _scale(doc: dict, readings: Readings) -> Iterable[Metric]:
    desired = GaugeMetricFamily("mwrun_scale_desired_replicas",
                                "Replicas a scaled process should have", labels=["process"])
    running = GaugeMetricFamily("mwrun_scale_running_replicas",
                                "Replicas running (not draining)", labels=["process"])
    draining = GaugeMetricFamily("mwrun_scale_draining_replicas",
                                 "Replicas draining before they stop", labels=["process"])
    for name, counts in doc["scale"].items():
        desired.add_metric([name], counts["desired"])
        running.add_metric([name], counts["current"])
        draining.add_metric([name], len(counts["draining"]))
    operations = CounterMetricFamily("mwrun_scale_operations",
                                     "Operations on the job's shape begun, by operation",
                                     labels=["operation"])
    if doc["scale"]:  # an elastic job: each kind counted from 0 (see _downtime)
        for op in sorted({*OPERATIONS, *readings.operations}):
            operations.add_metric([op], readings.operations.get(op, 0))
    return desired, running, draining, operations


class Source:
    """What a scrape reads, in the loop's thread: the status document and the head's
    readings of the same moment. ``procs()``: the supervisor's process records;
    ``lag()``: the loop's lag; ``bundles()``: bundles written; ``operations()``: per
    operation, how many began; ``call_times()``: observe/calltimes.py's histograms."""

    def __init__(self, document: Callable[[], dict], counts: Callable[[], Mapping],
                 procs: Callable[[], Mapping[str, ProcessRecord]],
                 lag: Callable[[], float], bundles: Callable[[], int],
                 operations: Callable[[], Mapping[str, int]], downtimes: Downtimes,
                 call_times: Callable[[], Mapping] = dict):
        self.document, self.counts, self.procs = document, counts, procs
        self.lag, self.bundles, self.operations = lag, bundles, operations
        self.downtimes, self.call_times = downtimes, call_times
        self._me = psutil.Process()

    def families(self) -> list[Metric]:
        cpu = self._me.cpu_times()
        readings = Readings(head_cpu_seconds=cpu.user + cpu.system,
                            loop_lag_seconds=self.lag(), calls=self.counts(),
                            # spent: those counted against max_restarts (not a drill's)
                            restarts={name: (rec.spent, rec.restarts - rec.spent)
                                      for name, rec in self.procs().items()},
                            bundles=self.bundles(), operations=dict(self.operations()),
                            downtimes={w: (list(c), t) for w, (c, t)
                                       in self.downtimes.worlds.items()},
                            call_times=self.call_times())
        return families(self.document(), readings)
