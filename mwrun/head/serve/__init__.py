"""What the head serves: the control socket's verbs (``control``, each request checked
whole by ``requests``), scale and drain requests (``elastic``), and what a start's
library says before its pid is known (``early``).

The verbs translate requests into calls on the supervisor and read the observers.
May import the head's ``decide``, ``hosts``, ``observe`` and ``postmortem``.
"""
