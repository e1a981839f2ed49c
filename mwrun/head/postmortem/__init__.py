"""Why a world hung or broke, captured while the evidence lives: ``capture`` asks every
member of the world at once (its library through ``stacks``, the same ask as ``mwrun
stacks``, and py-spy from outside), ``bundles`` writes what came back, ``culprit``
says who in one line (pure), ``shelf`` bounds how many bundles a run keeps.

May import the head's ``decide`` (events, records), never ``hosts``, ``serve`` or
``observe``.
"""
