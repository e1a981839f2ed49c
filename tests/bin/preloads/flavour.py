"""Reads $FLAVOUR at import, as a package reads its configuration."""

import os

FLAVOUR = os.environ.get("FLAVOUR", "plain")
