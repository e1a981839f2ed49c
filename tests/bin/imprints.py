"""Prints, as JSON, what its package (tests.bin.preloads.imprint) set up at import."""

import json
import random
import signal

from tests.bin.preloads import imprint

print(json.dumps({"from_os": imprint.FROM_OS.random(), "on_purpose": imprint.ON_PURPOSE.random(),
                  "global": random.random(),
                  "handler": signal.getsignal(signal.SIGTERM) is imprint.on_term}), flush=True)
