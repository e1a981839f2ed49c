"""The command line: thin click commands (``commands``; ``acting`` for the verbs that
act on a live run: kill-world, drill, stop; ``scaling`` for scale and drain;
``inspecting`` for stacks; ``reading`` for logs and report; ``common`` for what they
share), the drill's plan and live loop (``drill``, ``drillscale``, ``drillrisk``;
``drillstart``, which starts ``drilling`` with ``drillwatch``, ``drillops`` and
``drillsave``, or ``drillslow`` for a slow-member drill) and the views they
print (``planview``, ``statusview``, ``logview``, ``stacksview``; ``summaryview``,
``drillview`` and ``report``, which draws, for ``mwrun report``). A run is read
through ``mwrun.runs``, with ``mwrun.schema``'s names; its history through
``records``' public names, which hold every figure the views word.

May import: ``mwrun.errors``, ``mwrun.schema``, ``mwrun.runs``, ``mwrun.terminal``,
``mwrun.stacktext``, ``mwrun.protocol`` (a slow member's request), ``records``,
``plan``, ``host`` (``mwrun agent``), and ``head`` only inside ``launch``; lazily inside
each command, so that ``mwrun --help``, ``validate`` and ``status`` never import torch,
and ``status``, ``logs``, ``report``, ``kill-world`` and ``stop`` never the head.
Never ``worlds``.
"""

from mwrun.cli.commands import main

__all__ = ["main"]
