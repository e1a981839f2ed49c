"""The command line: thin click commands (``commands``; ``acting`` for the verbs that
act on a live run: kill-world, drill, stop; ``scaling`` for scale and drain;
``inspecting`` for stacks; ``common`` for what they share) and the views they print
(``planview``, ``statusview``, ``logview``, ``stacksview``; ``timeline`` and ``report``
for ``mwrun report``). A run is read through ``mwrun.runs``, with ``mwrun.schema``'s names.

May import: ``mwrun.errors``, ``mwrun.schema``, ``mwrun.runs``, ``mwrun.terminal``,
``mwrun.stacktext``,
``plan``, ``host`` (``mwrun agent``), and ``head`` only inside ``launch``; lazily inside
each command, so that ``mwrun --help``, ``validate`` and ``status`` never import torch,
and ``status``, ``logs``, ``report``, ``kill-world`` and ``stop`` never the head.
Never ``worlds``.
"""

from mwrun.cli.commands import main

__all__ = ["main"]
