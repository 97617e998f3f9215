"""Kubernetes quantities and pod resource requests, exactly as Kubernetes counts them.

Quantities are parsed with exact rational arithmetic ("1.5Gi", "100m", "2e3") and rounded
up the way resource.Quantity's Value()/MilliValue() do, so a request is never undercounted.
CPU is kept in millicores, everything else in base units (bytes, counts).

Pod requests follow the scheduler's rules (k8s.io/component-helpers resource.PodRequests):
app containers summed, restartable init containers (sidecars) added and running alongside
later init containers, plain init containers taking the max, pod overhead on top, and pod-level
`spec.resources` overriding cpu/memory where set. A container's limits stand in for missing
requests, as the API server's defaulting would have done.

Every amount is saturated at MAX_UNITS: the API server accepts quantities (`cpu: "1e16"`,
`memory: "1e40"`) that no node can hold and no int64 column can store. A saturated request fits
nowhere, as kube-scheduler's NodeResourcesFit would say, and never overflows the arrays downstream.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
CORE_RESOURCES = (CPU, MEMORY, PODS, EPHEMERAL_STORAGE)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
MAX_UNITS = 2**50
"""Saturation bound of every amount this module returns (to_units, resource_list, pod_requests,
node_allocatable), in either sign. 2**50 is 1 PiB of memory or storage, about 10**12 cores, 10**15
devices: beyond any node, so a saturated request fits nowhere and a node clamped to it loses nothing
real. Well inside int64 so that sums of saturated amounts stay exact: the store subtracts bound pods
from a node's free column, and the planner sums a gang's requests (count x request), so up to 8191
saturated pods add up to less than 2**63 instead of wrapping around to a small or negative total."""

_SATURATE_DIGITS = 30
"""A quantity whose leading digit is above 10**30 is saturated, and one below 10**-30 is rounded up to
one unit, without computing it: `1e2000000000` is a valid quantity, and 10**2000000000 would stall the
event loop for minutes. 10**30 with any suffix, in any unit, is above MAX_UNITS; 10**-30 is below
one unit."""

# Linear time on any input: `\d+(?:\.\d*)?` cannot split a run of digits two ways (`\d+\.?\d*` could,
# and a 100k-digit string with a bad tail then took minutes of backtracking on the event loop).
_QUANTITY = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def _shown(value: str) -> str:
    """`value` quoted for an error message, cut short: a quantity may be megabytes of digits."""
    return repr(value) if len(value) <= 40 else repr(value[:40]) + f"... ({len(value)} characters)"


def _parts(value: str) -> tuple[bool, Decimal, int, Fraction]:
    """(negative, mantissa, decimal exponent, suffix multiplier) of a quantity string."""
    m = _QUANTITY.match(value.strip())
    if not m:
        raise QuantityError(
            f"{_shown(value)} is not a Kubernetes quantity (examples: 100m, 64Mi, 1.5Gi, 2e3)"
        )
    sign, number, exponent, suffix = m.groups()
    if exponent and len(exponent.lstrip("eE+-")) > 18:
        # beyond int64, which the API server refuses too; also keeps int() off huge digit strings
        raise QuantityError(f"{_shown(value)}: exponent out of range")
    # Decimal, not Fraction(str): a mantissa of thousands of digits is valid and Fraction's parser
    # would refuse it (int's string-length limit)
    mantissa = Decimal(number)
    multiplier = Fraction(_BINARY[suffix]) if suffix in _BINARY else _DECIMAL[suffix or ""]
    return sign == "-", mantissa, int(exponent[1:]) if exponent else 0, multiplier


def _magnitude(mantissa: Decimal, exponent: int) -> int:
    """The decimal exponent of the leading digit: 2.5e7 -> 7, 0.03 -> -2 (0 for zero)."""
    return mantissa.adjusted() + exponent if mantissa else 0


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a Kubernetes quantity: "100m" -> 1/10, "1.5Gi" -> 1610612736.

    A value beyond 10**±10000 raises QuantityError rather than take minutes to compute exactly;
    `to_units` saturates such values without calling this.
    """
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a string or number, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"quantity must be finite, got {value!r}")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity must be a string or number, got {type(value).__name__}")
    negative, mantissa, exponent, multiplier = _parts(value)
    if not mantissa:
        return Fraction(0)
    if abs(_magnitude(mantissa, exponent)) > 10_000:
        raise QuantityError(f"{_shown(value)} is out of range")
    amount = Fraction(mantissa) * Fraction(10) ** exponent * multiplier
    return -amount if negative else amount


def saturate(units: int) -> int:
    """`units` clamped to [-MAX_UNITS, MAX_UNITS]."""
    return MAX_UNITS if units > MAX_UNITS else -MAX_UNITS if units < -MAX_UNITS else units


def to_units(resource: str, value: str | int | float) -> int:
    """A quantity in this project's integer unit for `resource`: millicores for cpu, else base units.

    Rounds up, as Quantity.MilliValue()/Value() do, so a request is never undercounted; saturates at
    ±MAX_UNITS.
    """
    if not isinstance(value, (str, int, float)):
        raise QuantityError(f"quantity must be a string or number, got {type(value).__name__}")
    return _to_units(resource, value)


@functools.lru_cache(maxsize=4096)
def _to_units(resource: str, value: str | int | float) -> int:
    # cached: a cluster repeats a handful of quantity strings ("100m", "64Mi") across every pod
    if isinstance(value, str):
        negative, mantissa, exponent, _ = _parts(value)
        magnitude = _magnitude(mantissa, exponent)
        if mantissa and magnitude > _SATURATE_DIGITS:
            return -MAX_UNITS if negative else MAX_UNITS
        if mantissa and magnitude < -_SATURATE_DIGITS:
            return 0 if negative else 1  # rounded up to the smallest unit, as MilliValue does
    amount = parse_quantity(value)
    if resource == CPU:
        amount *= 1000
    return saturate(math.ceil(amount))


def units_text(resource: str, units: int) -> str:
    """A human form of an integer amount: 2500 cpu -> "2500m", 3Gi memory -> "3Gi"."""
    if resource == CPU:
        return f"{units}m"
    if resource in (MEMORY, EPHEMERAL_STORAGE) or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units and units % size == 0:
                return f"{units // size}{suffix}"
        return str(units)
    return str(units)


def resource_list(raw: Mapping[str, Any] | None, *, where: str) -> dict[str, int]:
    """A ResourceList ({"cpu": "2", "memory": "4Gi"}) in integer units; errors name `where`."""
    out: dict[str, int] = {}
    if not raw:
        return out
    if not isinstance(raw, Mapping):
        raise QuantityError(f"{where}: expected a map of resource name to quantity")
    for name, value in raw.items():
        try:
            out[str(name)] = to_units(str(name), value)
        except QuantityError as exc:
            raise QuantityError(f"{where}.{name}: {exc}") from None
    return out


def _saturated(amounts: dict[str, int]) -> dict[str, int]:
    """Each amount clamped to ±MAX_UNITS (sums of saturated amounts exceed it)."""
    return {k: saturate(v) for k, v in amounts.items()}


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v


def _max_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > total.get(k, 0):
            total[k] = v


def container_requests(container: Mapping[str, Any], *, where: str) -> dict[str, int]:
    """Requests of one container; limits stand in for requests that are not set."""
    res = container.get("resources") or {}
    requests = resource_list(res.get("requests"), where=f"{where}.resources.requests")
    for name, value in resource_list(res.get("limits"), where=f"{where}.resources.limits").items():
        requests.setdefault(name, value)
    return requests


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests of a pod as the scheduler counts them, plus one `pods` slot."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for i, c in enumerate(spec.get("containers") or ()):
        _add(total, container_requests(c, where=f"spec.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(spec.get("initContainers") or ()):
        req = container_requests(c, where=f"spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
            running = dict(sidecars)
        else:
            running = dict(req)
            _add(running, sidecars)
        _max_into(init_peak, running)
    _add(total, sidecars)
    _max_into(total, init_peak)
    pod_level = resource_list((spec.get("resources") or {}).get("requests"), where="spec.resources.requests")
    for name in (CPU, MEMORY):
        if name in pod_level:
            total[name] = pod_level[name]
    _add(total, resource_list(spec.get("overhead"), where="spec.overhead"))
    total[PODS] = total.get(PODS, 0) + 1
    # clamped after summing, per resource: containers, sidecars and overhead of saturated amounts
    # add up past MAX_UNITS in Python's ints, never in int64
    return {k: v for k, v in _saturated(total).items() if v}


def node_allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    """status.allocatable, falling back to status.capacity as the scheduler does."""
    status = node.get("status") or {}
    raw = status.get("allocatable") or status.get("capacity") or {}
    return resource_list(raw, where="status.allocatable")


class ResourceIndex:
    """Interns resource names to dense columns; the core four come first, extended ones appended."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = list(CORE_RESOURCES)
        self._col: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        for n in names:
            self.column(n)

    def column(self, name: str) -> int:
        col = self._col.get(name)
        if col is None:
            col = self._col[name] = len(self.names)
            self.names.append(name)
        return col

    def find(self, name: str) -> int | None:
        return self._col.get(name)

    def __len__(self) -> int:
        return len(self.names)
