"""The process's heap once the initial list is applied: the list's garbage collected, what is left
frozen, and the C heap's free pages given back to the OS.

Receiving a list (hundreds of MiB of JSON at 150,000 pods, 2 MiB a page) leaves the C allocator's
heap full of freed holes between what the cache keeps; glibc returns only the free top of its heap
on its own. `malloc_trim(0)` returns every whole free page (about 11 MiB at 30,000 pods). Elsewhere
(no glibc, or no malloc_trim) this does nothing.

What is left then (the cache, the imported modules, numba's compiler) lives as long as the process.
Python's cyclic collector walks every tracked object on each full pass: 65-80 ms at 30,000 pods and
several times that at 150,000, a pause of the event loop that answers filter calls. Frozen, those
objects are left out of every pass; pods that change later are new objects and are collected as usual.

From then on the collector runs once every `YOUNG_OBJECTS` allocations rather than every 700: a
large gang's first plan allocates tens of thousands of objects, and at 700 the collector ran dozens
of times in it, its older generations' passes walking every object cached since the freeze (a
10,000-member JobSet's pods among them): a quarter of that filter call. Cycles wait a little longer
to be collected; what they hold is small.
"""

from __future__ import annotations

import ctypes
import gc
import logging

log = logging.getLogger(__name__)


def trim() -> bool:
    """Return the C heap's free pages to the OS; whether it could ask."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim(0)
    return True


YOUNG_OBJECTS = 50_000  # allocations between two passes of the collector's youngest generation
OLDER_PASSES = 20  # passes of a generation between two of the next one (Python's default: 10)


def settle() -> None:
    """Once the initial list is applied: collect what receiving it left, freeze the rest out of the
    collector's passes, space its passes out, and give free pages back."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, OLDER_PASSES, OLDER_PASSES)
    trim()
