"""The library: what runs inside the user's process (``import mwrun``).

``job`` joins every world of the process (``mwrun.init``); ``world`` is one member's
handle on one world (form, break, rejoin); ``calls`` are its send/recv and collectives,
``work`` the handles of calls in flight; ``worldspec`` is what the process is told about
a world; ``backends`` makes a generation's torch process group and ``gloo_abort`` stops
a gloo group that torch cannot abort; ``nccl`` is the discipline of nccl groups (error
handling that spares the process, nonblocking communicators, the NCCL version) and
``aborts`` runs every abort in parallel against a deadline; ``signals`` keeps Ctrl-C
for the main thread;
``interruptible`` runs the store waits that Ctrl-C and exit must end, and
``storehost`` the store a member hosts by hand, ended before the interpreter's
teardown; ``supervisor_link`` sends heartbeats and world events to the supervisor, when
there is one.

May import: ``mwrun.errors``, ``mwrun.protocol``, ``mwrun.lookups``, torch. Never ``plan``,
``host``, ``head`` or ``cli``: a user's process carries none of the launcher.
"""
