"""The control channel: a Unix socket in the run folder, JSON lines, small handlers.

Each request is one JSON object on one line with a ``verb``; the reply is one line,
``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. The socket is the
owner's only (mode 0600, and the peer's uid is checked). Verbs, each a handler below
whose docstring is its protocol:

- ``status`` -> ``{"ok": true, "status": <status document>}``
- ``bringup`` -> ``{"ok": true, "state": <run state>, "waiting": {world: ...},
  "failed": {process: what happened}}``: what ``launch --detach`` waits on (progress.py)
- ``kill_world {world, rank?, signal?}`` -> ``{"ok": true, "signalled": [...]}``
- ``stop {force?}`` -> ``{"ok": true}``; the run then stops on its own time (see
  ``handle_stop`` for a stop asked again)
- ``drill {summary}`` -> ``{"ok": true}``: a ``mwrun drill``'s summary, appended to the
  run's history as one ``drill`` record (the history file is the head's alone: it
  rotates it, so no other process may append to it)
- ``scale {changes: ["worker=6", "cache=+1"], op?}`` and ``drain {replicas:
  ["worker-3"], op?}`` -> ``{"ok": true, "op", "state", "changes": [...]}`` (elastic.py;
  refused whole with ``{"ok": false, "refused": true, "error"}``); ``op {op}`` -> that
  operation as it stands (what ``mwrun scale`` waits on)
- ``hello``, ``heartbeat``, ``world``, ``bye`` -> no reply: what the library tells the
  supervisor (see mwrun/worlds/supervisor_link.py); ``scale`` with ``process``, ``pid``,
  ``id``, ``target``, ``count`` is the library's ``job.scale``: its answer goes down
  its own connection as ``{"verb": "reply", "id", ...}`` (downlink.py)
- ``stacks {processes?: [...], world?}`` -> ``{"ok": true, "id", "age_s", "waiting":
  [process], "members": [{process, pid, host, state, reason, answered, threads?}]}``:
  each selected member's library asked for its threads' stacks (stacks.py);
  ``stacks_result {id}`` -> that ask as it stands; ``stacks_told {process, pid, id,
  threads}`` -> no reply: a library's answer

The handlers only translate requests into calls on the supervisor; they see the loop
as a ``Run``. This is the server; the client (``request``) is ``mwrun.runs``'s, so the
command line asks a supervisor without importing the head.
"""

from __future__ import annotations

from typing import Protocol

from mwrun import protocol, runs
from mwrun.head.decide.supervisor import Supervisor
from mwrun.head.hosts.downlink import Downlink
from mwrun.head.hosts.router import Remote
from mwrun.head.observe.faults import Faults
from mwrun.head.observe.history import History
from mwrun.head.observe.progress import Progress, view
from mwrun.head.observe.scaleops import Ops
from mwrun.head.observe.traffic import Traffic
from mwrun.head.postmortem.stacks import Stacks, select
from mwrun.head.serve import requests
from mwrun.head.serve.early import Early
from mwrun.head.serve.elastic import Elastic
from mwrun.host import sockets
from mwrun.host.jsonlines import Connection, Server
from mwrun.runs import peer_uid, same_user, signal_number  # noqa: F401 - shared with the client


class Run(Protocol):
    """What the control handlers act on (the loop, as they see it)."""

    supervisor: Supervisor
    history: History
    traffic: Traffic
    faults: Faults
    ops: Ops
    elastic: Elastic
    downlink: Downlink
    progress: Progress
    stacks: Stacks
    early: Early
    agents: Remote | None

    def document(self, fresh_usage: bool = False) -> dict: ...
    def host_time(self, name: str, t: float) -> float: ...
    def now(self) -> float: ...


def handle_status(loop, request: dict) -> dict:
    """status -> the status document of the run."""
    return {"ok": True, "status": loop.document(fresh_usage=True)}


def handle_bringup(loop: Run, request: dict) -> dict:
    """bringup -> the worlds not formed yet since launch, and who failed before."""
    sup = loop.supervisor
    return {"ok": True, "state": sup.state.value,
            **view(loop.progress.unformed, sup.procs, sup.worlds, loop.now())}


def handle_kill_world(loop, request: dict) -> dict:
    """kill_world {world, rank: int|null, signal: name|number (KILL)} -> who was signalled."""
    world = request.get("world")
    rank = request.get("rank")
    if not isinstance(world, str) or (rank is not None and not isinstance(rank, int)):
        return {"ok": False, "error": "kill_world needs a world name and an optional rank"}
    try:
        sig = signal_number(request.get("signal", "KILL"))
        return {"ok": True, "signalled": loop.supervisor.kill_world(world, rank, sig)}
    except ValueError as exc:
        return {"ok": False, "error": str(exc)}


def handle_stop(loop, request: dict) -> dict:
    """stop {force?} -> the run begins a clean stop; with force, SIGKILL at once. Asked
    again while it stops without force -> {"already": true, "grace_left": seconds until
    SIGKILL, or null once sent}, and nothing more is done: a second user's stop must
    not cut the first one's grace (checkpoints being saved) without saying so."""
    sup, force = loop.supervisor, request.get("force") is True
    if sup.stopping and not force:
        return {"ok": True, "already": True, "grace_left": sup.stop.grace_left(sup.host.now())}
    if not sup.stopping:
        sup.request_stop("stop requested by mwrun stop")
    if force:
        sup.request_stop("mwrun stop --force")  # asked again (head/stopping.py): SIGKILL now
    return {"ok": True}


def handle_drill(loop, request: dict) -> dict:
    """drill {summary: object} -> the summary written to the history."""
    loop.history.drill(request["summary"])
    return {"ok": True}


def handle_scale(loop: Run, request: dict) -> dict | None:
    """scale {changes: [PROCESS=N|+K|-K], op?} -> the operation; or, from the library
    (process, pid, id, target, count): its answer goes down to it as a reply."""
    if "process" not in request:
        return loop.elastic.scale(list(request["changes"]), request.get("op"))
    count = str(request["count"])
    change = f"{request['target']}={count}"
    reply = loop.elastic.scale([change], None)
    loop.downlink.tell(request["process"], {"verb": "reply", "id": request["id"], **reply})
    return None


def handle_drain(loop: Run, request: dict) -> dict:
    """drain {replicas: [PROCESS-I], op?} -> the operation (the replicas drained)."""
    return loop.elastic.drain(list(request["replicas"]), request.get("op"))


def handle_op(loop: Run, request: dict) -> dict:
    """op {op} -> that scale operation as it stands."""
    return loop.elastic.op(request["op"])


def handle_stacks(loop: Run, request: dict) -> dict:
    """stacks {processes?, world?} -> the ask: who was asked, who cannot be, and why."""
    sup = loop.supervisor
    worlds = {name: list(w.plan.members) for name, w in sup.worlds.items()}
    try:
        names = select(sup.procs, worlds, request.get("world"), request.get("processes", []))
    except ValueError as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, **loop.stacks.ask(sup.procs[n] for n in names)}


def handle_stacks_result(loop: Run, request: dict) -> dict:
    """stacks_result {id} -> that ask, with what each member told so far."""
    found = loop.stacks.result(request["id"])
    if found is None:
        return {"ok": False, "error": f"no stacks ask {request['id']!r} (too old?)"}
    return {"ok": True, **found}


def handle_stacks_told(loop: Run, request: dict) -> None:
    loop.stacks.told(request["id"], request["process"], request["pid"], request["threads"],
                     request.get("error"), request.get("flight_recorder"))


def handle_hello(loop: Run, request: dict, connection: Connection | None = None) -> None:
    nccl = request.get("nccl")
    loop.supervisor.members.on_hello(request["process"], request["pid"],
                             float(request.get("interval", 1.0)),
                             nccl if isinstance(nccl, str) else None)
    if loop.supervisor.members.current(request["process"], request["pid"]):  # this start of it:
        loop.downlink.hello(request["process"], request["pid"], connection)  # the way down


def handle_heartbeat(loop, request: dict) -> None:
    loop.supervisor.members.on_heartbeat(request.get("process"), request.get("pid"),
                                 request.get("next"))
    if isinstance(request.get("traffic"), dict):  # see mwrun/head/observe/traffic.py
        loop.traffic.beat(request.get("process"), request.get("pid"), float(request["t"]),
                          request["traffic"], loop.now())
    for world, (generation, t) in request.get("first_calls", {}).items():  # faults.py
        at = loop.host_time(request["process"], t)
        loop.faults.first_call(world, generation, at)
        loop.ops.first_call(world, at)


def handle_bye(loop, request: dict) -> None:
    loop.supervisor.members.on_bye(request.get("process"), request.get("pid"))


def handle_world(loop, request: dict) -> None:
    if request.get("event") == protocol.ABORT_HUNG:
        loop.supervisor.members.on_abort_hung(request.get("process"), request.get("pid"),
                                      str(request.get("reason") or ""))
        return
    if "t" in request:
        # Before the supervisor hears it: the re-form (or break) it makes is then timed.
        at = loop.host_time(request["process"], request["t"])
        if request["event"] == "ready":
            loop.faults.joined(request["world"], request["generation"], at)
        elif request["event"] == "broken":
            loop.faults.broken(request["world"], request["generation"], at)
        elif request["event"] == "added":  # scaleops.py: a peer has the new world
            loop.ops.added(request["world"], request["process"], at)
    loop.supervisor.members.on_world_event(request.get("process"), request.get("pid"),
                                     request.get("world"), request.get("generation"),
                                     request.get("event"), request.get("reason", ""))


HANDLERS = {"status": handle_status, "bringup": handle_bringup,
            "kill_world": handle_kill_world, "stop": handle_stop, "drill": handle_drill,
            "scale": handle_scale, "drain": handle_drain, "op": handle_op,
            "hello": handle_hello, "heartbeat": handle_heartbeat, "bye": handle_bye,
            "world": handle_world, "stacks": handle_stacks,
            "stacks_result": handle_stacks_result, "stacks_told": handle_stacks_told}


class Clients(Server):
    """The control socket's clients (host/jsonlines.py, with its bounds): the owner's
    only, so a client whose peer is another uid is closed unserved."""

    def __init__(self, selector, serve_line):
        super().__init__(selector, serve_line, admit=same_user)


def serve(loop, line: bytes, connection: Connection | None = None) -> dict | None:
    """One request line -> its reply (None for the verbs that get none). A line that
    is not a well-formed request is refused and changes nothing."""
    request, error = requests.parse(line)
    if request is None:
        return {"ok": False, "error": error}
    error = requests.problem(request)
    if error is not None:
        return None if requests.library(request) else {"ok": False, "error": error}
    return dispatch(loop, request, connection)


def relayed(loop, request) -> None:
    """A library message an agent relayed from its host: checked exactly as one on the
    local socket, and only the library's own verbs (a process on a remote host cannot
    stop the job, or drill it, through its agent)."""
    if isinstance(request, dict) and requests.library(request) \
            and requests.problem(request) is None:
        dispatch(loop, request)


def dispatch(loop, request: dict, connection: Connection | None = None) -> dict | None:
    verb = request.get("verb")
    handler = HANDLERS.get(verb) if isinstance(verb, str) else None
    if handler is None:
        return {"ok": False, "error": f"unknown verb {verb!r}"}
    if requests.library(request) and \
            loop.supervisor.processes.awaits_pid(request.get("process")):
        loop.early.hold(request, connection)  # served once its pid is told (early.py)
        return None
    try:
        if handler is handle_hello:
            handle_hello(loop, request, connection)
            return None
        return handler(loop, request)
    except (TypeError, ValueError, KeyError) as exc:
        return {"ok": False, "error": f"bad request: {exc}"}
    except Exception as exc:  # a bug in one request must never end the whole job
        return {"ok": False, "error": f"the supervisor could not serve {verb}:"
                                      f" {type(exc).__name__}: {exc}"}


listen = sockets.listen  # in the run folder, or a private folder under /tmp


# The client's side is the reader's (mwrun.runs): the command line asks a supervisor
# without importing the head.
request = runs.request
