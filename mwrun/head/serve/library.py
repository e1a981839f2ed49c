"""What the library inside each process tells the head (mwrun/worlds/supervisor_link.py),
on the control socket or relayed by its host's agent: its hello, heartbeats, world
events, bye, a stacks answer, and its own ``job.scale``. None gets a reply on the
socket; the library's scale is answered down its own connection (downlink.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwrun import protocol
from mwrun.head.decide.members import Members
from mwrun.head.hosts.downlink import Downlink
from mwrun.head.observe.faults import Faults
from mwrun.head.observe.scaleops import Ops
from mwrun.head.observe.traffic import Traffic
from mwrun.head.postmortem.stacks import Stacks
from mwrun.head.serve.elastic import Elastic


def _got(request: dict, field: str, default: Any = None) -> Any:
    """A field the request may lack (the members ignore a message that names no live
    start); its shape was checked whole by requests.problem."""
    return request.get(field, default)


class Library:
    def __init__(self, members: Members, downlink: Downlink, traffic: Traffic, faults: Faults,
                 ops: Ops, stacks: Stacks, elastic: Elastic,
                 host_time: Callable[[str, float], float], now: Callable[[], float]):
        self.members, self.downlink, self.traffic = members, downlink, traffic
        self.faults, self.ops, self.asks, self.elastic = faults, ops, stacks, elastic
        self.host_time = host_time  # a time a process told, on the head's clock (router.py)
        self.now = now  # the head's monotonic clock

    def hello(self, request: dict, connection: Any = None) -> None:
        """hello {process, pid, interval?, nccl?}: a start of the process is up; the
        connection it came on (None: relayed by its agent) is its way down."""
        nccl = request.get("nccl")
        self.members.on_hello(request["process"], request["pid"],
                              float(request.get("interval", 1.0)),
                              nccl if isinstance(nccl, str) else None)
        if self.members.current(request["process"], request["pid"]):  # this start of it:
            self.downlink.hello(request["process"], request["pid"], connection)  # the way down

    def heartbeat(self, request: dict) -> None:
        """heartbeat {process, pid, next?, hold?, t?, traffic?, first_calls?, times?}:
        alive, with its worlds' traffic, the first call of each world's generation
        (faults.py) and its calls' times; ``hold``: the most its host's agent holds its
        beats (host/relay.py)."""
        # The hottest verb (every member, every second or so): each field read once.
        process: Any = request.get("process")
        pid: Any = request.get("pid")
        self.members.on_heartbeat(process, pid, request.get("next"), request.get("hold"))
        if isinstance(request.get("traffic"), dict):  # see mwrun/head/observe/traffic.py
            self.traffic.beat(process, pid, float(request["t"]), request["traffic"], self.now())
        if "times" in request:  # checked by requests.py; see observe/calltimes.py
            self.traffic.times.beat(process, pid, request["times"])
        for world, (generation, t) in request.get("first_calls", {}).items():  # faults.py
            at = self.host_time(request["process"], t)
            self.faults.first_call(world, generation, at)
            self.ops.first_call(world, at)

    def bye(self, request: dict) -> None:
        """bye {process, pid}: it left its worlds (from now on /proc tells if it hangs)."""
        self.members.on_bye(_got(request, "process"), _got(request, "pid"))

    def world(self, request: dict) -> None:
        """world {process, pid, world, generation, event, reason?, t?}: a world of the
        member's formed, broke, was added, or its abort hung (then it is killed as hung)."""
        if request.get("event") == protocol.WorldReport.ABORT_HUNG:
            self.members.on_abort_hung(_got(request, "process"), _got(request, "pid"),
                                       str(request.get("reason") or ""))
            return
        if "t" in request:
            # Before the supervisor hears it: the re-form (or break) it makes is then timed.
            at = self.host_time(request["process"], request["t"])
            if request["event"] == protocol.WorldReport.READY:
                self.faults.joined(request["world"], request["generation"], at)
            elif request["event"] == protocol.WorldReport.BROKEN:
                self.faults.broken(request["world"], request["generation"], at)
            elif request["event"] == protocol.WorldReport.ADDED:  # scaleops.py: a peer has it
                self.ops.added(request["world"], request["process"], at)
        self.members.on_world_event(_got(request, "process"), _got(request, "pid"),
                                    _got(request, "world"), _got(request, "generation"),
                                    _got(request, "event"), _got(request, "reason", ""))

    def stacks_told(self, request: dict) -> None:
        """stacks_told {process, pid, id, threads, error?, flight_recorder?, trimmed?}: a
        library's answer to a stacks ask."""
        self.asks.told(request["id"], request["process"], request["pid"], request["threads"],
                       request.get("error"), request.get("flight_recorder"),
                       request.get("trimmed"))

    def scale(self, request: dict) -> None:
        """scale {process, pid, id, target, count}: the library's ``job.scale``; its
        answer goes down to it as ``{"verb": "reply", "id", ...}``."""
        count = str(request["count"])
        change = f"{request['target']}={count}"
        reply = self.elastic.scale([change], None)
        self.downlink.tell(request["process"], {"verb": protocol.Verb.REPLY, "id": request["id"],
                                                **reply})
