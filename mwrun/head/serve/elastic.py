"""Scale and drain requests, from the command line (``mwrun scale``, ``mwrun drain``)
and from inside the job (``job.scale``): checked, turned into a plan revision
(membership/), applied by the supervisor, followed phase by phase (scaleops.py) and
kept in the run folder (``revisions.jsonl``, bounded: observe/revisions.py).

Every request is whole or nothing: one that cannot be met (an unknown process, a count
beyond its ``scale``, a replica on a host that is lost now, a job that is stopping)
changes nothing and says why. An operation has an id (``--op``, else the head's
``op-N``); a request with an id that was used already in this run changes nothing and
answers with that operation as it stands: a retried command never scales twice,
however many operations came between (scaleops.Ops keeps every id, in the run folder:
opbook.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mwrun.head.decide import events as ev
from mwrun.head.observe.revisions import RevisionLog
from mwrun.head.observe.scaleops import Ops
from mwrun.membership import requests
from mwrun.membership.requests import Refused
from mwrun.membership.revision import Membership, Revision


class Elastic:
    def __init__(self, membership: Membership, supervisor, ops: Ops,
                 host_up: Callable[[str], bool], run_dir: Path):
        self.membership, self.supervisor, self.ops = membership, supervisor, ops
        self.host_up = host_up  # a host can start a process now (a lost one cannot)
        self.log = RevisionLog(Path(run_dir))  # revisions.jsonl, bounded
        self.count = 0

    def scale(self, changes: list[str], op: str | None) -> dict:
        """``changes``: ``PROCESS=N``, ``PROCESS=+K``, ``PROCESS=-K``."""
        return self._request(op, "scale " + " ".join(changes), lambda op: self._scale(
            [requests.parse_change(c) for c in changes], op))

    def drain(self, replicas: list[str], op: str | None) -> dict:
        return self._request(op, "drain " + " ".join(replicas),
                             lambda op: self.membership.drain(replicas, op))

    def op(self, op: str) -> dict:
        found = self.ops.view(op)
        if found is None:
            return {"ok": False, "error": f"no operation {op!r} in this run"}
        return {"ok": True, **found}

    def _scale(self, changes: list[requests.Change], op: str) -> Revision:
        for change in changes:
            spec = requests.scaled(self.membership.topology.specs, change.process)
            if change.target(len(self.membership.replicas(spec.name))) > \
                    len(self.membership.replicas(spec.name)) and not self.host_up(spec.base.host):
                raise Refused(f"{change}: host {spec.base.host}, where {spec.name} runs, is"
                              " lost now; try again once mwrun status shows it up")
        return self.membership.scale(changes, op)

    def _request(self, op: str | None, text: str, propose: Callable[[str], Revision]) -> dict:
        if op is not None and (used := self.ops.view(op)) is not None:
            return {"ok": True, "repeated": True, **used}
        if self.supervisor.stopping or self.supervisor.finished:
            return {"ok": False, "refused": True,
                    "error": f"{text}: the job is {self.supervisor.state.value}; nothing"
                             " was changed"}
        while op is None:  # the head's own id: never one used already (--op op-7)
            self.count += 1
            op = f"op-{self.count}" if self.ops.view(f"op-{self.count}") is None else None
        try:
            revision = propose(op)
        except Refused as exc:
            return {"ok": False, "refused": True, "error": f"{exc}; nothing was changed"}
        worlds_of = {n: list(self.supervisor.procs[n].plan.worlds) for n in revision.retired
                     if n in self.supervisor.procs}
        found = self.ops.begin(op, text, revision, worlds_of)
        if not revision.empty:
            self.membership.adopt(revision)  # the plan new starts are made from
            self.supervisor.revise(revision)
            self.log.keep(revision.record())  # the command line reads them back
        return {"ok": True, **found.view()}

    def __call__(self, event: ev.Event) -> None:
        """A subscriber of the supervisor's events: a retired replica that is gone
        gives back its GPUs and CPUs."""
        if isinstance(event, ev.Gone):
            self.membership.gone(event.process)

    def view(self) -> dict[str, dict]:
        """Per scaled process, for the status document: desired, current (running,
        not draining), min, max, and the replicas draining."""
        found = {}
        procs = self.supervisor.procs
        for name, spec in self.membership.topology.scaled.items():
            assert spec.scale is not None
            mine = [rec for rec in procs.values() if rec.plan.replica_of == name]
            found[name] = {"desired": len(self.membership.replicas(name)),
                           "current": sum(1 for r in mine if r.state.alive and not r.retired),
                           "min": spec.scale.min, "max": spec.scale.max,
                           "draining": sorted(r.plan.name for r in mine if r.retired)}
        return found
