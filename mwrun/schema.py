"""What a run writes, in one place: the state names, the run folder's file names and
the history's record kinds. The head writes with these names and the command line
reads with them; no state name is spelled as a string anywhere else. The values are
what the status document (``state.json``, ``mwrun status --json``) and
``history.jsonl`` carry, so they never change. No imports: the supervisor moves the
states, ``mwrun.runs`` reads them back.

Process::

    STARTING --joined its worlds--> RUNNING
    RUNNING --heartbeats late, or stopped (seen in /proc)--> UNRESPONSIVE --beats again--> RUNNING
    STARTING | RUNNING | UNRESPONSIVE --stopped or silent past its hang_timeout--> HUNG
    HUNG --killed--> (exit)
    (exit) --restart policy says yes--> RESTARTING --backoff over--> STARTING
    (exit) --code 0, no restart--> EXITED
    (exit) --failed, no restart left--> FAILED
    RESTARTING --its worlds closed: nothing to rejoin--> FAILED (EXITED if it had exited 0)
    any live state --did not die after SIGKILL--> FAILED
    any live state --the job is being stopped--> STOPPED
    STARTING | RUNNING | UNRESPONSIVE --retired (mwrun scale, mwrun drain)--> DRAINING
    DRAINING --its worlds drained, then SIGTERM, grace, SIGKILL: exit--> EXITED (gone
        from the job: a retired replica is never restarted, its exit is no failure)

World::

    FORMING --every member joined this generation--> HEALTHY
    FORMING | HEALTHY --a member exited, hung or was killed--> BROKEN
    BROKEN --its members are back, next generation--> FORMING
    FORMING | HEALTHY | BROKEN --resized (a member added or drained away)--> FORMING
    HEALTHY --a member is retired--> DRAINING (calls still work)
    DRAINING --released, drain_timeout, or a member ended--> FORMING (resized) | CLOSED
        (removed: gone from the job)
    any --cannot form again, or the job ended--> CLOSED
    (a plain torch.distributed world mwrun cannot read shows as UNKNOWN while it forms)

Run::

    STARTING --every process spawned--> RUNNING --stop asked, or on_failure: stop-->
    STOPPING --nothing left--> FINISHED | FAILED
    RUNNING --nothing left to run or restart--> FINISHED | FAILED
    any but FINISHED | FAILED --its head died (read back: mwrun.runs)--> LOST

Host (a remote host's agent link; the head's own machine is LOCAL)::

    CONNECTING --the agent said hello--> UP --link closed or silent--> LOST
    LOST --retry--> CONNECTING
"""

from enum import Enum


class ProcessState(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    UNRESPONSIVE = "unresponsive"
    RESTARTING = "restarting"
    HUNG = "hung"
    DRAINING = "draining"  # retired: its worlds drain, then it is stopped
    EXITED = "exited"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def alive(self) -> bool:
        return self in (ProcessState.STARTING, ProcessState.RUNNING, ProcessState.UNRESPONSIVE,
                        ProcessState.HUNG, ProcessState.DRAINING)

    @property
    def final(self) -> bool:
        return self in (ProcessState.EXITED, ProcessState.FAILED, ProcessState.STOPPED)

    @property
    def expected(self) -> bool:
        """Alive, or about to be again (a restart is due)."""
        return self.alive or self is ProcessState.RESTARTING


class Goal(str, Enum):
    """What the head wants of a process: its desired state, against which its observed
    one (ProcessState) is reconciled (mwrun/head/decide/reconcile.py). Set only by the
    plan and its revisions (RUN, RETIRE), the stop (STOP) and the restart policy (END,
    or RUN again after a backoff)."""

    RUN = "run"  # running: started, and started again after an end the policy restarts
    RETIRE = "retire"  # a scale down retired it: its worlds drain, then it ends and leaves
    STOP = "stop"  # the whole job stops
    END = "end"  # ended for good: the policy restarts it no more, or nothing is left to join


class WorldGoal(str, Enum):
    """What the head wants of a world: its desired state, against which its observed one
    (WorldState) is reconciled (mwrun/head/decide/worldreconcile.py)."""

    FORM = "form"  # formed with its plan's members (re-formed after each break, resized)
    DRAIN = "drain"  # its calls work until released or its drain_timeout, then it goes on
    GONE = "gone"  # removed from the job on purpose (a scale down, a drain)
    END = "end"  # closed: a member will never come back, or the job is over


class WorldState(str, Enum):
    FORMING = "forming"
    HEALTHY = "healthy"
    BROKEN = "broken"
    DRAINING = "draining"  # its replica is retired: calls still work until it closes
    CLOSED = "closed"
    UNKNOWN = "unknown"  # only in the document: a plain torch world, FORMING to the supervisor


class RunState(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    UNRESPONSIVE = "unresponsive"
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"
    # Never written by a head: what a reader makes of a document whose head died
    # before the run ended (mwrun.runs.lost). Final: nothing will change it again.
    LOST = "lost"

    @property
    def final(self) -> bool:
        return self in (RunState.FINISHED, RunState.FAILED, RunState.LOST)


FINAL = tuple(s.value for s in RunState if s.final)  # run states a document ends in


# The moves each machine above draws, as tables: the state a record is in -> the states
# it may move to. The head's one mover per kind of record checks every move against its
# table (a move not drawn here is a bug in the head, raised where it happens).
_P, _W, _R = ProcessState, WorldState, RunState
_ENDS = (_P.EXITED, _P.FAILED, _P.STOPPED)  # an exit (or giving up), per its policy
PROCESS_MOVES: dict[ProcessState, frozenset[ProcessState]] = {
    # a start that cannot be made is STARTING again (spawn) before it ends
    _P.STARTING: frozenset((_P.STARTING, _P.RUNNING, _P.HUNG, _P.DRAINING, _P.RESTARTING,
                            *_ENDS)),
    _P.RUNNING: frozenset((_P.UNRESPONSIVE, _P.HUNG, _P.DRAINING, _P.RESTARTING, *_ENDS)),
    _P.UNRESPONSIVE: frozenset((_P.RUNNING, _P.HUNG, _P.DRAINING, _P.RESTARTING, *_ENDS)),
    _P.HUNG: frozenset((_P.RESTARTING, *_ENDS)),
    _P.DRAINING: frozenset(_ENDS),  # retired: never restarted
    _P.RESTARTING: frozenset((_P.STARTING, *_ENDS)),  # ends: its worlds closed, or a stop
    _P.EXITED: frozenset(), _P.FAILED: frozenset(), _P.STOPPED: frozenset(),
}
WORLD_MOVES: dict[WorldState, frozenset[WorldState]] = {
    _W.FORMING: frozenset((_W.FORMING, _W.HEALTHY, _W.BROKEN, _W.CLOSED)),
    _W.HEALTHY: frozenset((_W.FORMING, _W.BROKEN, _W.DRAINING, _W.CLOSED)),
    _W.BROKEN: frozenset((_W.FORMING, _W.CLOSED)),
    _W.DRAINING: frozenset((_W.FORMING, _W.CLOSED)),
    _W.CLOSED: frozenset((_W.CLOSED,)),  # a closed world may still be removed from the job
    _W.UNKNOWN: frozenset(),  # only in the document, never a record's state
}
RUN_MOVES: dict[RunState, frozenset[RunState]] = {
    _R.STARTING: frozenset((_R.RUNNING, _R.STOPPING, _R.FINISHED, _R.FAILED)),
    _R.RUNNING: frozenset((_R.STOPPING, _R.FINISHED, _R.FAILED)),
    _R.STOPPING: frozenset((_R.FINISHED, _R.FAILED)),
    _R.UNRESPONSIVE: frozenset(), _R.FINISHED: frozenset(), _R.FAILED: frozenset(),
    _R.LOST: frozenset(),  # never written by a head (mwrun.runs reads it so)
}


class Start(str, Enum):
    """How a process was last started (the status document's per-process ``start``)."""

    WARM = "warm"  # forked from its host's zygote, torch imported already
    COLD = "cold"  # started the ordinary way


class HeadState(str, Enum):
    """The status document's ``head.state``, there only while its head is away: it died
    and the agents keep the job going for ``head_grace`` (host/absence.py); or while a
    new head takes the run back (head/adopting.py)."""

    AWAY = "away"
    ADOPTING = "adopting"


class HostState(str, Enum):
    LOCAL = "local"
    CONNECTING = "connecting"
    UP = "up"
    LOST = "lost"


class Event(str, Enum):
    """The ``event`` of a history record (see mwrun/head/observe/history.py for their fields)."""

    START = "start"
    SPAWN = "spawn"
    SIGNAL = "signal"
    HANG = "hang"
    EXIT = "exit"
    BREAK = "break"
    FORM = "form"
    CLOSE = "close"
    STOP = "stop"
    END = "end"
    FAULT = "fault"  # one fault of a world, measured phase by phase (see Phase)
    DRILL = "drill"  # a ``mwrun drill``'s summary, written when it ends
    SCALE = "scale"  # one replica added or retired by a scale operation (see ScalePhase)
    ADD = "add"  # a world made for a new replica
    RESIZE = "resize"  # a world re-forms with other members
    DRAIN = "drain"  # a world drains (a member is retired)
    REMOVE = "remove"  # a world closed on purpose and left the job
    POSTMORTEM = "postmortem"  # a bundle written for a world's hang or break (its path, culprit)
    SLOW = "slow"  # a world's slow member named, or none any more (observe/slowwatch.py)
    LATE = "late"  # a drill made a member late to every call of a world (no fault)


class ScalePhase(str, Enum):
    """The phases of one replica's change by a scale operation, in order; the same names
    in ``history.jsonl`` (``scale`` records), ``mwrun scale``'s output, ``status`` and
    ``report``. An addition: requested -> started -> formed -> told -> first_call; a
    removal (a drain): requested -> draining -> closed -> exited. Each a wall-clock
    time on the head's clock, null when it did not happen."""

    REQUESTED = "requested"  # the head took the request
    STARTED = "started"  # the new process exists
    FORMED = "formed"  # every world of the new replica formed
    TOLD = "told"  # its peers have the new worlds (in their job.worlds)
    FIRST_CALL = "first_call"  # the first completed call in one of its worlds
    DRAINING = "draining"  # its worlds turned draining: every member told
    CLOSED = "closed"  # its worlds closed (or re-formed without it)
    EXITED = "exited"  # the retired process exited

    @property
    def adds(self) -> bool:
        return self in (ScalePhase.STARTED, ScalePhase.FORMED, ScalePhase.TOLD,
                        ScalePhase.FIRST_CALL)

    @property
    def removes(self) -> bool:
        return self in (ScalePhase.DRAINING, ScalePhase.CLOSED, ScalePhase.EXITED)


class OpState(str, Enum):
    """A scale operation: under way, or ended (every change it made done, or some not)."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Phase(str, Enum):
    """The phases of one fault of a world, in order; the same names in ``status``
    (``last_fault``), ``history.jsonl`` (``fault`` records), ``report`` and ``drill``.
    Each is a wall-clock time on the head's clock (a remote host's times corrected by
    its measured offset), or null when it did not happen (never guessed)."""

    T_FAULT = "t_fault"  # the signal sent, or the exit seen when nobody sent one
    EXIT_SEEN = "exit_seen"  # the supervisor (or the member's agent) saw the exit
    SURVIVORS_TOLD = "survivors_told"  # the break written where the members watch
    RESTARTED = "restarted"  # the new process exists
    REFORMED = "reformed"  # every member joined the next generation
    FIRST_CALL = "first_call"  # the world's first completed call after it


# The fault timeline's id on the history's records (head/faults.py, head/history.py):
# a world's event (break, form, close) carries FAULT_ID, the id of the fault it belongs
# to; a process's event (signal, exit, spawn) FAULT_IDS, {world: that id}; a ``fault``
# record its own as ``id``. Every reader joins on it, never on nearness in time.
FAULT_ID = "fault"
FAULT_IDS = "faults"

RATES = "rates"  # the key of a history's rate samples: {world: [calls/s, bytes/s]}
# Beside RATES in the same record: {world: [calls, t]}, the world's completed calls since
# the run started as its members counted them (never going back when a member restarts,
# see head/traffic.py Traffic.totals) as of head wall time t (when the beats it is made
# of arrived). Pace over a window is a difference of these over the window's length.
CALLS = "calls"
# Beside them, where members time their collectives: {world: {member: seconds}}, how
# long each member waited per collective over the last few seconds (the member its
# peers wait for waits least: head/observe/slowness.py); ``mwrun report`` draws it.
WAITS = "waits"

# The run folder, $MWRUN_HOME/runs/RUN_ID/:
RUNS = "runs"  # under $MWRUN_HOME
STATE = "state.json"  # the status document, kept current, final after the run
HISTORY = "history.jsonl"  # events and rates over time
HISTORY_ROTATED = "history.1.jsonl"  # the part before, once HISTORY grew past its cap
EVENTS = "events.log"  # mwrun's own events, as the console showed them
TOPOLOGY = "topology.yaml"  # the topology as launched
PLAN = "plan.json"  # the plan it was launched with
REVISIONS = "revisions.jsonl"  # every revision of the plan since (scale, drain), one a line
REVISIONS_ROTATED = "revisions.1.jsonl"  # the part before, once REVISIONS grew past its cap
OPS = "ops"  # every scale operation's id, as it last stood: OPS/NN.jsonl (head/observe/opbook.py)
LOGS = "logs"  # the folder of every process's output, LOGS/NAME.log
LOG_BACKUPS = 3  # rotated logs kept beside each: NAME.log.1 ... NAME.log.3
SUPERVISOR_LOG = "supervisor.log"  # a detached head's console
ZYGOTE_LOG = "zygote.log"  # the zygotes of the head machine's agent: their own output
KEEPER_LOG = "keeper.log"  # the worlds' stores' keeper's own output (mwrun/keeper)
CONTROL = "control.sock"  # the supervisor's control socket (owner only)
HEAD_AWAY = "head-away.json"  # the head's machine's agent: the head went, since when
KEEPER_SOCK = "keeper.sock"  # where the keeper connects to its head (owner only)
KEEPER_DOOR = "keeper-door.sock"  # where a new head reaches the keeper (owner only)
EPOCHS = "epochs"  # one file a head: EPOCHS/N, made by the head of epoch N (its pid, why)
SECRET = "head.secret"  # the run's secret (owner only): a new head proves it to the agents
AGENTS = "agents.json"  # each host's agent as the head reached it: {host: {control, pid}}
REPORT = "report.png"  # where ``mwrun report`` draws by default
POSTMORTEM = "postmortem"  # the bundles of hangs and breaks: POSTMORTEM/WORLD-gGEN/


def log_name(process: str) -> str:
    """The file of a process's output inside LOGS."""
    return f"{process}.log"
