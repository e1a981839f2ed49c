"""The states of processes, worlds and runs (no imports; the supervisor moves them).

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

World::

    FORMING --every member joined this generation--> HEALTHY
    FORMING | HEALTHY --a member exited, hung or was killed--> BROKEN
    BROKEN --its members are back, next generation--> FORMING
    any --cannot form again, or the job ended--> CLOSED

Run::

    STARTING --every process spawned--> RUNNING --stop asked, or on_failure: stop-->
    STOPPING --nothing left--> FINISHED | FAILED
    RUNNING --nothing left to run or restart--> FINISHED | FAILED
"""

from enum import Enum


class ProcessState(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    UNRESPONSIVE = "unresponsive"
    RESTARTING = "restarting"
    HUNG = "hung"
    EXITED = "exited"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def alive(self) -> bool:
        return self in (ProcessState.STARTING, ProcessState.RUNNING, ProcessState.UNRESPONSIVE,
                        ProcessState.HUNG)

    @property
    def final(self) -> bool:
        return self in (ProcessState.EXITED, ProcessState.FAILED, ProcessState.STOPPED)

    @property
    def expected(self) -> bool:
        """Alive, or about to be again (a restart is due)."""
        return self.alive or self is ProcessState.RESTARTING


class WorldState(str, Enum):
    FORMING = "forming"
    HEALTHY = "healthy"
    BROKEN = "broken"
    CLOSED = "closed"


class RunState(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    UNRESPONSIVE = "unresponsive"
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"

    @property
    def final(self) -> bool:
        return self in (RunState.FINISHED, RunState.FAILED)
