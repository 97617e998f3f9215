"""Giving the C heap's free pages back to the OS once the initial list is applied.

Receiving a list (hundreds of MiB of JSON at 150,000 pods, 2 MiB a page) leaves the C allocator's
heap full of freed holes between what the cache keeps; glibc returns only the free top of its heap
on its own. `malloc_trim(0)` returns every whole free page (about 11 MiB at 30,000 pods). Elsewhere
(no glibc, or no malloc_trim) this does nothing.
"""

from __future__ import annotations

import ctypes
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
