"""The control channel: a Unix socket in the run folder, JSON lines, small handlers.

Each request is one JSON object on one line with a ``verb``; the reply is one line,
``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. The socket is the
owner's only (mode 0600, and the peer's uid is checked). Verbs:

- ``status`` -> ``{"ok": true, "status": <status document>}``
- ``bringup`` -> ``{"ok": true, "state": <run state>, "waiting": {world: ...},
  "failed": {process: what happened}}``: what ``launch --detach`` waits on (progress.py)
- ``kill_world {world, rank?, signal?}`` -> ``{"ok": true, "signalled": [...]}``
- ``stop {force?}`` -> ``{"ok": true}``; the run then stops on its own time (see
  ``Verbs.stop`` for a stop asked again)
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

The verbs only translate requests into calls on the supervisor: the operator's are
``verbs.Verbs``'s methods, the library's ``library.Library``'s, each one's docstring its
protocol, and ``dispatcher.Dispatcher`` serves each line to them. This is the server;
the client (``request``) is ``mwrun.runs``'s, so the command line asks a supervisor
without importing the head.
"""

from __future__ import annotations

from mwrun import runs
from mwrun.host import sockets
from mwrun.host.jsonlines import Server
from mwrun.runs import peer_uid, same_user, signal_number  # noqa: F401 - shared with the client


class Clients(Server):
    """The control socket's clients (host/jsonlines.py, with its bounds): the owner's
    only, so a client whose peer is another uid is closed unserved."""

    def __init__(self, selector, serve_line):
        super().__init__(selector, serve_line, admit=same_user)


listen = sockets.listen  # in the run folder, or a private folder under /tmp


# The client's side is the reader's (mwrun.runs): the command line asks a supervisor
# without importing the head.
request = runs.request
