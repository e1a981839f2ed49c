"""Planning: from a topology file to a plan, before anything starts.

``topology`` parses the file (with ``yamlread`` and ``fields``, every mistake with its
position; ``hosts`` reads its hosts, ``preload`` its warm starts); ``inventory`` says
what each host offers; ``placement`` assigns hosts, GPUs, CPUs and ports;
``timeouts`` keeps every process's clocks in one order (and says where each came
from); ``environment`` is each process's environment; ``ports`` finds free ports. Pure
functions over frozen dataclasses, the machine's facts passed in.

May import: ``mwrun.errors``, ``mwrun.machine``, ``mwrun.launchspec``, ``mwrun.protocol``
(the heartbeat's cadence), ``mwrun.schema`` (how a process starts). Never ``worlds``,
``host``, ``head``, ``cli``, or torch.
"""
