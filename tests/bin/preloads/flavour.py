"""Reads $FLAVOUR at import, as a package reads its configuration; notes the pid of
the process that imported it (a warm process's zygote)."""

import os

FLAVOUR = os.environ.get("FLAVOUR", "plain")
IMPORTED_BY = os.getpid()
