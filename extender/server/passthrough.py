"""Passthrough: the filter reply for a plain pod, made of kube-scheduler's own list of nodes.

kube-scheduler offers only nodes its own filters passed on its cache. For a pod that is in no gang
and has no plan, this service refuses only nodes where its cache knows more (held, not schedulable
here, or changed moments ago: `Scheduler.plain_refusals`). When it refuses none of them, the reply
is the request's own NodeNames bytes: no name is decoded, mapped or encoded. Names unknown to the
cache are still refused with HTTP 400: each distinct list is decoded and checked once, and a list
seen again (kube-scheduler sends the same one while its feasible nodes do not change) is compared
as bytes, until a node is added or removed.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from extender.scheduling.scheduler import Scheduler
from extender.server import wire

_LISTS_KEPT = 4
_REFUSALS_SEARCHED = 64  # refused names looked for in the raw array; more: decode it
# A name JSON writes byte for byte (no quote, backslash or control character to escape).
_RAW_NAME = re.compile(r'[^"\\\x00-\x1f]+')


class Passthrough:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self._gen = -1  # the scheduler's node_names_gen the fields below were made at
        self._known: list[bytes] = []  # NodeNames arrays, raw, whose every name the cache holds
        self._names: frozenset[bytes] = frozenset()  # the cache's node names that JSON writes as is

    def reply(self, body: bytes, pod: dict[str, Any]) -> bytes | None:
        """The filter reply for `pod` (peeked from `body`, already checked), or None: the general path
        answers. Raises UnknownNodesError when the list names a node the cache does not hold."""
        scheduler = self.scheduler
        refusals = scheduler.plain_refusals(pod)
        if refusals is None:
            return None
        array = wire.names_array(body)
        if array is None:
            return None
        if scheduler.node_names_gen != self._gen:
            self._gen, self._known = scheduler.node_names_gen, []
            self._names = frozenset(n.encode() for n in scheduler.store.node_rows if _RAW_NAME.fullmatch(n))
        raw = b"\\" not in array  # no escape sequence: each name's bytes are the name itself
        if raw and len(refusals) <= _REFUSALS_SEARCHED:
            # a refused name not found quoted in the array is not offered
            refusals = frozenset(n for n in refusals if b'"%s"' % n.encode() in array)
        if not refusals and array in self._known:
            scheduler.plain_passed(pod)
            return wire.filter_echo(array)
        shaped = raw and array.startswith(b'["') and array.endswith(b'"]')
        parts = array[2:-2].split(b'","') if shaped else None
        if parts is None or not self._names.issuperset(parts):
            # the exact check, on decoded names: an unknown one is an HTTP 400
            names = wire.node_names(array)
            if not names:
                return None  # empty or malformed: the general path says why
            scheduler.check_known(names)
            parts = [n.encode() for n in names]
        # every name is known (a part equal to a known name's bytes, with no escape in the array, is it)
        self._known = [array, *self._known[: _LISTS_KEPT - 1]]
        if refusals:
            refused = {n.encode() for n in refusals}
            kept = [p for p in parts if p not in refused]
            if not kept:
                return None  # refused everywhere: the general path gives the reason
            if len(kept) < len(parts):
                scheduler.plain_passed(pod)
                return wire.filter_echo(orjson.dumps([p.decode() for p in kept]))
        scheduler.plain_passed(pod)
        return wire.filter_echo(array)
