"""At import, what a user's package may do: generators drawn from the OS and one
seeded on purpose, and a SIGTERM handler."""

import random
import signal

FROM_OS = random.Random()  # seeded from the OS: differs in every fresh process
ON_PURPOSE = random.Random(7)  # the same in every process, warm or cold


def on_term(sig, frame):
    raise SystemExit(5)


signal.signal(signal.SIGTERM, on_term)
