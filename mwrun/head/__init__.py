"""The head: the supervisor of a running job, inside ``mwrun launch``.

Its folders are its parts (each folder's ``__init__`` says what it holds):

- ``decide/``: the records, the only code that moves their states, the policy, the
  timers; what it decides goes out as typed events.
- ``hosts/``: from a process to the hands of its host (here, or an agent over ssh or
  Slurm), the line down to each library, the worlds' stores.
- ``serve/``: the control socket's verbs, scale and drain requests.
- ``observe/``: the status document, the run folder, history, faults, scale phases,
  traffic, progress and the console: subscribers and readers, never movers.
- ``postmortem/``: bundles of a world's hang or break, and its one-line culprit.

``loop`` is the composition root and the one select loop that drives them; ``bringup``
takes a topology file to a running loop (or a detached one); ``wakeups`` turns signals
into loop wakeups. Who may import whom inside the head: tests/unit/test_layout.py
(``HEAD_FOLDERS``). What a run writes is named in ``mwrun.schema``; reading it back,
and the control socket's client, is ``mwrun.runs``, so the command line reads a run
without importing this.

May import: ``mwrun.errors``, ``mwrun.protocol``, ``mwrun.terminal``, ``mwrun.machine``,
``mwrun.schema``, ``mwrun.runs``, ``mwrun.launchspec``, ``mwrun.lookups``,
``mwrun.stacktext``, ``plan``,
``membership``, ``host``, ``records`` (observe counts the finish line's restarts and
breaks with its tally, as ``report`` does), ``keeper``'s ``wire`` (what it says to the
worlds' stores' keeper, a process of its own). Never ``worlds`` or ``cli``, nor torch:
the keeper holds the stores.
"""
