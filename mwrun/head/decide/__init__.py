"""What the head decides: the records of every process and world, the only code that
moves their states, the restart and failure policy, and the head's timers.

``supervisor`` takes what happened (an exit, a hello, a tick, a request) and decides;
``records`` holds each process's goal (its desired state) and what was seen of its
current start (its ``Worker``), and each world's; ``reconcile`` is the one place a
process's state moves, ``worldreconcile`` a world's, each from both; ``processbook`` and
``worldbook`` keep the records and what the rest asks of them; ``reshaping`` applies a
membership that changes (scale, drain); ``stopping`` ends the job; ``members`` reads
what the library tells, ``plain`` what a plain torch.distributed group shows in its
world's store; ``beats`` what heartbeats say, and hangs; ``restarts`` a start's end and
the next start; ``firstwords`` what a first start printed before its hello (why it
could not start); ``policy`` (restarts, crash loops), ``hangs`` (hang detection a
stalled head cannot fool) and ``drills`` are pure; ``deadlines`` holds the timers;
``events`` are what the supervisor tells, as typed records, to every subscriber.

Acts only through the typed seams it defines (``supervisor.Host``): it imports no other
folder of the head. May import the head's ``decide`` alone.
"""
