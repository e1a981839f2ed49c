"""From a request to its verb: the verb table (the operator's verbs, verbs.py, and the
library's, library.py), every request checked whole first (requests.py), what a start
says before its pid is known held (early.py), and a bad request or a bug in a verb
answered, never raised into the loop. The loop builds one, and hands it to the control
socket's clients (``serve``), to the agents (``relayed``), and tells it each pid
(``pid_told``)."""

from __future__ import annotations

from collections.abc import Callable

from mwrun.head.hosts.downlink import Line
from mwrun.head.serve import requests
from mwrun.head.serve.early import Early
from mwrun.head.serve.library import Library
from mwrun.head.serve.verbs import Verbs
from mwrun.protocol import Verb


class Dispatcher:
    def __init__(self, verbs: Verbs, library: Library, awaits_pid: Callable[[object], bool]):
        self.library = library
        self.awaits_pid = awaits_pid  # its start is made, its pid not told (processbook.py)
        self.early = Early()  # what such a start says meanwhile
        self.verbs: dict[str, Callable[[dict], dict | None]] = {
            "status": verbs.status, "bringup": verbs.bringup, "kill_world": verbs.kill_world,
            "stop": verbs.stop, "drill": verbs.drill, "drain": verbs.drain, "op": verbs.op,
            "stacks": verbs.stacks, "stacks_result": verbs.stacks_result,
            # scale: the operator's (changes), or the library's own (process, ...)
            Verb.SCALE: lambda request: library.scale(request) if "process" in request
            else verbs.scale(request),
            Verb.HELLO: library.hello, Verb.HEARTBEAT: library.heartbeat,
            Verb.BYE: library.bye, Verb.WORLD: library.world,
            Verb.STACKS_TOLD: library.stacks_told}

    def serve(self, line: bytes, connection: Line | None = None) -> dict | None:
        """One request line -> its reply (None for the verbs that get none). A line that
        is not a well-formed request is refused and changes nothing."""
        request, error = requests.parse(line)
        if request is None:
            return {"ok": False, "error": error}
        error = requests.problem(request)
        if error is not None:
            return None if requests.library(request) else {"ok": False, "error": error}
        return self.dispatch(request, connection)

    def relayed(self, request: object) -> None:
        """A library message an agent relayed from its host: checked exactly as one on the
        local socket, and only the library's own verbs (a process on a remote host cannot
        stop the job, or drill it, through its agent)."""
        if isinstance(request, dict) and requests.library(request) \
                and requests.problem(request) is None:
            self.dispatch(request)

    def pid_told(self, process: str, pid: int) -> None:
        """What ``process``'s start ``pid`` said before its pid came, served now."""
        for request, connection in self.early.take(process, pid):
            self.dispatch(request, connection)

    def dispatch(self, request: dict, connection: Line | None = None) -> dict | None:
        verb = request.get("verb")
        handler = self.verbs.get(verb) if isinstance(verb, str) else None
        if handler is None:
            return {"ok": False, "error": f"unknown verb {verb!r}"}
        if requests.library(request) and self.awaits_pid(request.get("process")):
            self.early.hold(request, connection)  # served once its pid is told (early.py)
            return None
        try:
            if verb == Verb.HELLO:  # the one verb that keeps its connection: the way down
                self.library.hello(request, connection)
                return None
            return handler(request)
        except (TypeError, ValueError, KeyError) as exc:
            return {"ok": False, "error": f"bad request: {exc}"}
        except Exception as exc:  # a bug in one request must never end the whole job
            return {"ok": False, "error": f"the supervisor could not serve {verb}:"
                                          f" {type(exc).__name__}: {exc}"}
