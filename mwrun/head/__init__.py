"""The head: the supervisor of a running job, inside ``mwrun launch``.

``supervisor`` is the only place that decides (moves the states of ``mwrun.schema``, applies
``policy``, with ``worldbook`` for the worlds' states, ``hangs`` for hang detection and
``deadlines`` for its timers; the work of an event is what it touches) and tells what it
does as typed ``events``, to which the console, ``history`` and ``document``'s state.json
writer subscribe; ``loop`` is its event loop and hands
(spawns through ``host``, or through ``agents`` on remote hosts reached by ``remote``
links over ssh or ``slurm``; writes ``stores``, served once ``pending`` has them;
serves ``control`` with ``requests`` checked; never waits for a remote host: a remote
start, probe or lost link is answered later, as an event);
``bringup`` takes a topology file to a running loop (or a detached one); ``document``
is the status document, ``traffic`` the worlds' rates, ``history`` the run's timeline;
``rundir`` writes the run folder; ``console`` shows and logs output; ``stacks`` asks the
members' libraries what each thread is doing (``mwrun stacks``); ``postmortem`` captures
a world's members when one hangs or the world breaks (the hang's kill waits for it) and
writes the bundle, with ``culprit``'s one line of who and what. What a run
writes is named in ``mwrun.schema``; reading it back, and the control socket's
client, is ``mwrun.runs``, so the command line reads a run without importing this.

May import: ``mwrun.errors``, ``mwrun.protocol``, ``mwrun.terminal``, ``mwrun.machine``,
``mwrun.schema``, ``mwrun.runs``, ``mwrun.launchspec``, ``mwrun.lookups``,
``mwrun.stacktext``, ``plan``,
``membership``, ``host``. Never
``worlds`` or ``cli``. Only ``stores`` imports torch, and only once a launch is under way.
"""
