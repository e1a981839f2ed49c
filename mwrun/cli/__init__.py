"""The command line: thin click commands (``commands``) and the views they print
(``planview``, ``statusview``, ``logview``).

May import anything in mwrun, lazily inside each command, so that ``mwrun --help``,
``validate`` and ``status`` never import torch.
"""

from mwrun.cli.commands import main

__all__ = ["main"]
