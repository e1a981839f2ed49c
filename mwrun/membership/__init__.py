"""Membership: what a running job should be made of, and how it gets there.

A job's processes and worlds are not frozen at launch: a scaled process (``scale:
{min, max}`` in the topology) gains and loses replicas while the job runs. This part
holds the *desired* membership (which replicas each scaled process should have), turns
a request (``worker=6``, ``+2``, ``-1``, a drain of ``worker-3``) into a *revision* of
the plan (``revision``: new replicas placed where their host has room, their worlds
made from the same templates as at launch, a world that lists the process bare
resized), and says what each world must do to get there (``worlds``: form, resize now,
drain and then resize or close). Pure: the head applies it (head/elastic.py), ports
come from an injected chooser, nothing here runs or waits.

May import: ``plan``, ``mwrun.errors``. Never ``worlds``, ``host``, ``head``, ``cli``, or
torch.
"""
