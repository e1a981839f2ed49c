"""What runs on every host: the hands that spawn, pin, watch and signal processes.

``process`` is one live child (its own session, CPU affinity, a pidfd for its exit,
signals to its process group); ``lines`` turns its output into lines; ``watchdog``
kills every process group if the supervisor is SIGKILLed. The head uses these for its
own machine; an agent on a remote host will use the same.

May import: ``mwrun.errors``, psutil. Never ``worlds``, ``plan``, ``head``, ``cli``, or
torch; nothing here decides anything.
"""
