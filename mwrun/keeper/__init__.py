"""The keeper: the worlds' stores, in a process of their own beside the head.

One torch TCPStore per world (``stores``), brought up without waiting for torch
(``pending``), in the keeper's process (``main``), which does what its head writes
(``wire``) and nothing else. Beside it, the ``breaker``: what an agent starts to break
a world in its store while the head is away (host/breaks.py). The head never imports
torch: forked warm from the head machine's zygote, the keeper costs the bring-up no
import at all (a second of CPU on a busy start), and it is where the stores can
outlive a head that dies (DESIGN, "A head that can die").

May import: ``mwrun.errors``, ``mwrun.protocol``, ``mwrun.lookups``, ``plan`` (the
worlds' plans, as JSON), torch. Never ``head``, ``host``, ``membership``, ``worlds`` or
``cli``: the head imports ``wire`` alone of it.
"""
