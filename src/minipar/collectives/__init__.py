"""Collective algorithms built from point-to-point ``send``/``recv``, to compare with ``dist``.

* :mod:`.ring` — ring reduce-scatter, all-gather and all-reduce (Patarasuk & Yuan 2009),
* :mod:`.recursive_doubling` — recursive-doubling all-reduce (Thakur et al. 2005),
* :mod:`.parameter_server` — gather to one server, sum, send back (the bottleneck the ring removed),
* :mod:`.demo` — every ``torch.distributed`` primitive on small readable tensors, for the notebook.

Every function takes the process group as ``group=None`` (the default group) and does nothing
on a group of one rank.
"""

from .parameter_server import parameter_server_all_reduce
from .recursive_doubling import recursive_doubling_all_reduce
from .ring import ring_all_gather, ring_all_reduce, ring_reduce_scatter

__all__ = [
    "ring_all_reduce",
    "ring_reduce_scatter",
    "ring_all_gather",
    "recursive_doubling_all_reduce",
    "parameter_server_all_reduce",
]
