"""An idle member that speaks the library's side of the protocol without torch:
hello, 'ready' in each of its worlds, then heartbeats, like an idle mwrun process."""

import json
import os
import threading

from mwrun.worlds.supervisor_link import SupervisorLink

worlds = json.loads(os.environ["MWRUN_WORLDS"])
interval = max(0.05, min(5.0, min(w["timeout"] for w in worlds.values()) / 5))  # as job.py
agent = SupervisorLink(os.environ["MWRUN_CONTROL"], os.environ["MWRUN_PROCESS"], interval).start()
for name, world in worlds.items():
    agent.world_event(name, world["generation"], "ready")
threading.Event().wait()
