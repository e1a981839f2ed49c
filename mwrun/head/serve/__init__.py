"""What the head serves: the control socket (``control``) and its verbs, the operator's
(``verbs``) and what the library tells (``library``), each request checked whole by
``requests`` and served by the ``dispatcher``, which holds what a start's library says
before its pid is known (``early``); scale and drain requests (``elastic``).

The verbs translate requests into calls on the supervisor and read the observers; each
is handed the parts it uses (the supervisor through a Protocol), never the loop.
May import the head's ``decide``, ``hosts``, ``observe`` and ``postmortem``.
"""
