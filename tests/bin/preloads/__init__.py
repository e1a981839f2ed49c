"""Modules a test names in ``preload``: each does at import what a user's package might."""
