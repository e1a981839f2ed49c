"""How the head reaches what runs: from a process to the hands of its host
(``router``: this machine's ``host.hands.Hands``, or a remote host's agent through
``agents``, ``links``, ``remote`` over ssh or ``slurm``, ``remotebook``, with each
host's clock in ``clocks``/``hostclocks``), the line down to each library
(``downlink``), and the worlds' stores (``stores``: their keeper, a process of its
own, forked warm where it can be, written to in order without making the loop wait).

Never decides: what a host tells goes up to the loop as a call on a typed seam.
May import the head's ``decide`` (its events and records), never ``serve``, ``observe``
or ``postmortem``.
"""
