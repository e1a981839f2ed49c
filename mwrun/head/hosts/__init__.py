"""How the head reaches what runs: from a process to the agent of its host
(``router``; ``agents``, ``links``, ``remote`` started directly on the head's own
machine or over ssh, ``slurm``, ``remotebook``, with each host's clock in
``clocks``/``hostclocks``), the line down to each library (``downlink``), and the
worlds' stores (``stores``: their keeper, a process of its own that the head's
machine's agent starts, forked warm where it can be, written to in order without
making the loop wait). The head starts no process itself.

Never decides: what a host tells goes up to the loop as a call on a typed seam.
May import the head's ``decide`` (its events and records), never ``serve``, ``observe``
or ``postmortem``.
"""
