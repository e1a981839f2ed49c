"""The library: what runs inside the user's process (``import mwrun``).

``job`` joins every world of the process (``mwrun.init``; ``forming`` forms them, each
in a thread of its own) and keeps them in ``roster`` (the live set, and the order of
``events``: ``job.events()``); ``world`` is one member's handle on one world, a facade
over ``membership`` (the generation state machine: ``state`` holds where it stands,
``joining`` finds the generation to join and its ``seats``, ``reasons`` agrees on why
a call failed), ``calls`` (its send/recv and collectives, their ``arguments`` checked
first, waited for as ``completion`` says) and ``traffic`` (their counts); ``work`` are
the handles of calls in flight; ``worldspec`` is what the process is told about a
world; ``worldstore`` is a member's connections to a world's store and ``watcher`` its
thread asleep there; ``backends`` makes a generation's torch process group and
``gloo_abort`` stops a gloo group that torch cannot abort; ``nccl`` is the discipline of
nccl groups (error handling that spares the process, nonblocking communicators, the
NCCL version) and ``aborts`` runs every abort in parallel against a deadline;
``fencing`` ends a stale copy of a rank; ``signals`` keeps Ctrl-C for the main thread;
``interruptible`` runs the store waits that Ctrl-C and exit must end, and
``storehost`` the store a member hosts by hand, ended before the interpreter's
teardown; ``supervisor_link`` sends heartbeats (``beats``) and world events to the
supervisor, when there is one, on its ``uplink``, and reads its ``orders``; asked, it answers with
``stacks``: every thread's frames and the world call each is in (``inflight``).

May import: ``mwrun.errors``, ``mwrun.protocol``, ``mwrun.lookups``, torch. Never ``plan``,
``host``, ``head`` or ``cli``: a user's process carries none of the launcher.
"""
