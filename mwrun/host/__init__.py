"""What runs on every host: the hands that spawn, pin, watch and signal processes.

``process`` is one live child (its own session, CPU affinity, a pidfd for its exit,
signals to its process group); ``lines`` turns its output into lines; ``watchdog``
kills every process group if the supervisor is SIGKILLed; ``zygote``, ``child``,
``warm``, ``warmstarts`` and ``title`` make warm starts. The head uses these for its
own machine; ``agent`` (``mwrun agent``) uses the same on a remote host, and speaks
``frames`` with the head. ``jsonlines`` is the server of the libraries' links, the
head's control socket and each agent's ``relay`` alike.

May import: ``mwrun.errors``, ``mwrun.machine``, ``mwrun.launchspec``, ``mwrun.lookups``
(the zygote, once torch is imported), ``mwrun.protocol`` (the words of the libraries'
links), psutil. Never
``worlds``, ``plan``, ``head``, ``cli``, or torch; nothing here decides anything.
"""
