"""KAI's scheduling queue (`scheduling.run.ai/v2` Queue), read into this project's units.

A Queue gives, per resource (KAI's cpu, memory and gpu), a `quota` (guaranteed), a `limit` (hard
cap) and an `overQuotaWeight` (share of what is left over), plus a `parentQueue` for a hierarchy
and a `priority` (over-quota capacity goes to higher priorities first; default 100).

Units: KAI writes cpu in millicores (ours too), memory in megabytes (10**6 bytes; ours are bytes)
and gpu in devices (our `nvidia.com/gpu`; fractions are rounded down, a device is whole here).

Special values, as KAI documents them (docs/queues/README.md):
- `quota: -1` unlimited; `0` or unset: nothing guaranteed;
- `limit: -1` no limit; `0`: nothing above quota (with an unlimited quota: no limit).
Where we differ: a resource the Queue does not mention at all is neither guaranteed nor capped
(quota 0, no limit, weight 1). KAI's Go struct cannot tell "not mentioned" from 0, but a Queue
that sets only gpu would otherwise stop every pod that asks for cpu. Inside a resource that is
mentioned, an unset limit is KAI's 0 and an unset overQuotaWeight is 1 (what KAI's own examples
and default queue set).

A malformed Queue fails closed (`read_queue`): it keeps every limit that reads, and what does not
read admits nothing, so a child never runs past a parent written badly; the faults say why.

Numbers past int64: KAI keeps quota, limit and overQuotaWeight as float64, so `memory: {quota: 1e14}`
(10**20 bytes) is a valid Queue. Amounts saturate at MAX_AMOUNT and weights at MAX_WEIGHT, both above
anything a cluster can hold or a ratio can tell apart, and a number is bounded before it is computed
exactly (`1e2000000000` would otherwise build a billion-digit integer on the event loop). A priority
outside int64 is refused: KAI's is a Go int.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from extender.model.resources import CPU, MEMORY, units_text

GPU = "nvidia.com/gpu"
QUEUE_API_GROUP = "scheduling.run.ai"
QUEUE_KIND = "Queue"
DEFAULT_PRIORITY = 100

RESOURCES: dict[str, str] = {"cpu": CPU, "memory": MEMORY, "gpu": GPU}
"""KAI's resource name in a Queue -> this project's resource name."""
KAI_NAMES: dict[str, str] = {ours: kai for kai, ours in RESOURCES.items()}
_UNIT: dict[str, int] = {"cpu": 1, "memory": 10**6, "gpu": 1}
"""One KAI unit in this project's integer units (millicores, bytes, devices)."""


MAX_AMOUNT = 2**61
"""Saturation bound of a queue's quota and limit, in our units: 2 EiB of memory, 2.3 * 10**15 cores
or devices, above any cluster's total (2048 nodes at resources.MAX_UNITS each), so a saturated quota
or limit admits what the number written would. Two of them still add up inside int64 (2**63 - 1), which
orjson and numpy need."""
MAX_WEIGHT = Fraction(10**30)
"""Saturation bound of an overQuotaWeight (and 10**-30 its smallest positive value): weights are
ratios, and none a cluster's shares could tell apart lies beyond; /debug/queues shows it as a float."""
_MAGNITUDE = 30
"""Numbers whose leading digit is past 10**30 (or below 10**-30) are clamped there before being
computed exactly; every bound above is reached from it."""
_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_INT64 = (-(2**63), 2**63 - 1)


class QueueError(ValueError):
    """A Queue object that cannot be read; the message names the field."""


@dataclasses.dataclass(frozen=True)
class QueueResource:
    """One resource of a queue, in this project's units. None means without bound."""

    quota: int | None = 0
    limit: int | None = None
    weight: Fraction = Fraction(1)


UNBOUNDED = QueueResource()


@dataclasses.dataclass(frozen=True)
class Queue:
    name: str
    parent: str | None = None
    priority: int = DEFAULT_PRIORITY
    resources: Mapping[str, QueueResource] = dataclasses.field(default_factory=dict)
    """By this project's resource name; a resource not here is UNBOUNDED."""

    def resource(self, name: str) -> QueueResource:
        return self.resources.get(name, UNBOUNDED)


def _number(value: Any, where: str) -> Fraction:
    """A decimal number (an int, a float or its text), clamped to 10**±30 in magnitude."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise QueueError(f"{where}: expected a number, got {_shown(value)}")
    if isinstance(value, int):
        return _clamped(Fraction(value))
    text = str(value).strip()
    if not _DECIMAL.fullmatch(text):  # NaN, inf, hex, "1/3": not what a Queue's float64 holds
        raise QueueError(f"{where}: expected a number, got {_shown(value)}")
    try:
        number = Decimal(text)  # holds 1e2000000000 as digits and an exponent, nothing computed
    except InvalidOperation:
        raise QueueError(f"{where}: expected a number, got {_shown(value)}") from None
    if not number:
        return Fraction(0)
    sign = -1 if number < 0 else 1
    if number.adjusted() > _MAGNITUDE:
        return sign * Fraction(10**_MAGNITUDE)
    if number.adjusted() < -_MAGNITUDE:
        return sign * Fraction(1, 10**_MAGNITUDE)
    return Fraction(number)


def _clamped(number: Fraction) -> Fraction:
    bound = Fraction(10**_MAGNITUDE)
    return max(-bound, min(bound, number))


def _shown(value: Any) -> str:
    """`value` for a reason, cut short: a number may be megabytes of digits."""
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + f"... ({len(text)} characters)"


def _amount(value: Any, kai_name: str, where: str, *, special: str) -> int | None:
    """An amount in our units; -1 is `special` (None); other negatives are refused."""
    number = _number(value, where)
    if number == -1:
        return None
    if number < 0:
        raise QueueError(f"{where}: must be -1 ({special}) or at least 0, got {_shown(value)}")
    return min(MAX_AMOUNT, math.floor(number * _UNIT[kai_name]))


CLOSED = QueueResource(quota=0, limit=0, weight=Fraction(0))
"""A resource a malformed Queue does not say readably: nothing guaranteed, nothing admitted, no
share of what is left over (fail closed: a Queue cannot lose its limits by being written badly)."""


class _Problems:
    """The faults found in one Queue, in the order they were found; the first is its error."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def note(self, exc: QueueError) -> None:
        self.found.append(str(exc))


def _resource(raw: Any, kai_name: str, where: str, problems: _Problems) -> QueueResource:
    """One resource as far as it can be read; a field that cannot be is noted and read closed: an
    unreadable quota or weight as 0, an unreadable limit closes the resource (CLOSED: nothing
    admitted); a limit below the quota keeps the limit (the tighter) and lowers the quota to it."""
    if not isinstance(raw, Mapping):
        problems.note(QueueError(f"{where}: expected a map with quota, limit and overQuotaWeight"))
        return CLOSED
    try:
        quota = _amount(raw.get("quota", 0), kai_name, f"{where}.quota", special="unlimited")
    except QueueError as exc:
        problems.note(exc)
        quota = 0
    limit: int | None = quota
    if "limit" in raw and raw["limit"] is not None:
        try:
            limit = _amount(raw["limit"], kai_name, f"{where}.limit", special="no limit")
        except QueueError as exc:
            problems.note(exc)
            return CLOSED
        if limit == 0:
            limit = quota  # nothing above quota
    if limit is not None and quota is not None and limit < quota:
        below = f"{_shown(raw.get('limit'))} is below the quota {_shown(raw.get('quota'))}"
        problems.note(QueueError(f"{where}.limit: {below}"))
        quota = limit
    try:
        weight = _number(raw.get("overQuotaWeight", 1), f"{where}.overQuotaWeight")
        if weight < 0:
            got = _shown(raw.get("overQuotaWeight"))
            raise QueueError(f"{where}.overQuotaWeight: must be 0 or more, got {got}")
    except QueueError as exc:
        problems.note(exc)
        weight = Fraction(0)
    return QueueResource(quota=quota, limit=limit, weight=min(weight, MAX_WEIGHT))


def read_queue(obj: Mapping[str, Any]) -> tuple[Queue, tuple[str, ...]]:
    """A Queue object as far as it can be read, and what is wrong with it (nothing: it is sound).

    A malformed Queue still holds what it limits: every field that reads is kept, and what does not
    read is closed (CLOSED; a spec, resources or parent that cannot be read closes every resource,
    since the limits it would inherit are unknown). Raises QueueError only for a Queue without a
    name, which nothing can refer to."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not name or not isinstance(name, str):
        raise QueueError("metadata.name: a Queue needs a name")
    problems = _Problems()
    closed = {ours: CLOSED for ours in RESOURCES.values()}
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        problems.note(QueueError("spec: expected a map"))
        return Queue(name=name, resources=closed), tuple(problems.found)
    parent = spec.get("parentQueue") or None
    if parent is not None and not isinstance(parent, str):
        problems.note(QueueError(f"spec.parentQueue: expected a queue name, got {parent!r}"))
        return Queue(name=name, resources=closed), tuple(problems.found)
    if parent == name:
        problems.note(QueueError(f"spec.parentQueue: a queue cannot be its own parent ({name!r})"))
        return Queue(name=name, resources=closed), tuple(problems.found)
    priority = spec.get("priority", DEFAULT_PRIORITY)
    if priority is None:
        priority = DEFAULT_PRIORITY
    if isinstance(priority, bool) or not isinstance(priority, int):
        problems.note(QueueError(f"spec.priority: expected a whole number, got {_shown(priority)}"))
        priority = DEFAULT_PRIORITY
    elif not _INT64[0] <= priority <= _INT64[1]:
        problems.note(
            QueueError(f"spec.priority: {_shown(priority)} is outside int64 (KAI's priority is a Go int)")
        )
        priority = DEFAULT_PRIORITY
    raw = spec.get("resources") or {}
    if not isinstance(raw, Mapping):
        problems.note(QueueError("spec.resources: expected a map of cpu, memory and gpu"))
        return Queue(name=name, parent=parent, priority=priority, resources=closed), tuple(problems.found)
    out: dict[str, QueueResource] = {}
    for kai_name, ours in RESOURCES.items():
        if raw.get(kai_name) is not None:
            out[ours] = _resource(raw[kai_name], kai_name, f"spec.resources.{kai_name}", problems)
    return Queue(name=name, parent=parent, priority=priority, resources=out), tuple(problems.found)


def parse_queue(obj: Mapping[str, Any]) -> Queue:
    """A sound Queue object as read from the API; raises QueueError naming the (first) field at fault."""
    queue, problems = read_queue(obj)
    if problems:
        raise QueueError(problems[0])
    return queue


def amount_text(resource: str, units: int | None) -> str:
    """An amount as a Queue spells it: cpu in millicores ("4000m"), memory in MB, gpu in devices."""
    if units is None:
        return "unlimited"
    if resource == CPU:
        return f"{units}m"
    if resource == MEMORY:
        return f"{units // 10**6}M" if units % 10**6 == 0 else units_text(MEMORY, units)
    return str(units)
