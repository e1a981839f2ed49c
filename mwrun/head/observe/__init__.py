"""What the head shows and keeps: the status document (``document``), the run folder
(``rundir``), the run's ``history`` and the plan's ``revisions`` (both bounded), the
fault timeline (``faults``), each scale operation's phases (``scaleops``) and its id for
the life of the run (``opbook``), the worlds' ``traffic``, the launch's ``progress``
lines and the ``console``.

Each only listens (a subscriber of the supervisor's events, or a reader of its
records); none moves a state. ``history`` also counts what it hears with
``mwrun.records``' tally, so the finish line counts as ``report`` does. May import
the head's ``decide`` (events, records), never ``hosts``, ``serve`` or ``postmortem``.
"""
