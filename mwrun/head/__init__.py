"""The head: the supervisor of a running job, inside ``mwrun launch``.

``supervisor`` is the only place that decides (moves the ``states``, applies
``policy``); ``loop`` is its event loop and hands (spawns through ``host``, writes
``stores``, serves ``control``); ``bringup`` takes a topology file to a running loop
(or a detached one); ``stores`` hosts the worlds' stores; ``control`` is the control
socket's verbs; ``rundir`` is the run folder; ``console`` shows and logs output.

May import: ``mwrun.errors``, ``mwrun.protocol``, ``mwrun.terminal``, ``plan``, ``host``.
Never ``worlds`` or ``cli``. Only ``stores`` imports torch, and only once a launch is
under way.
"""
