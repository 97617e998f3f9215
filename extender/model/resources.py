"""Kubernetes quantities and pod resource requests, exactly as Kubernetes counts them.

Quantities are parsed with exact rational arithmetic ("1.5Gi", "100m", "2e3") and rounded
up the way resource.Quantity's Value()/MilliValue() do, so a request is never undercounted.
CPU is kept in millicores, everything else in base units (bytes, counts).

Pod requests follow the scheduler's rules (k8s.io/component-helpers resource.PodRequests):
app containers summed, restartable init containers (sidecars) added and running alongside
later init containers, plain init containers taking the max, pod overhead on top, and pod-level
`spec.resources` overriding cpu/memory where set. A container's limits stand in for missing
requests, as the API server's defaulting would have done.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
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
_QUANTITY = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a Kubernetes quantity: "100m" -> 1/10, "1.5Gi" -> 1610612736."""
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
    m = _QUANTITY.match(value.strip())
    if not m:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (examples: 100m, 64Mi, 1.5Gi, 2e3)")
    sign, number, exponent, suffix = m.groups()
    amount = Fraction(number)
    if exponent:
        amount *= Fraction(10) ** int(exponent[1:])
    elif suffix in _BINARY:
        amount *= _BINARY[suffix]
    else:
        amount *= _DECIMAL[suffix or ""]
    return -amount if sign == "-" else amount


def to_units(resource: str, value: str | int | float) -> int:
    """A quantity in this project's integer unit for `resource`: millicores for cpu, else base units.

    Rounds up, as Quantity.MilliValue()/Value() do, so a request is never undercounted.
    """
    if not isinstance(value, (str, int, float)):
        raise QuantityError(f"quantity must be a string or number, got {type(value).__name__}")
    return _to_units(resource, value)


@functools.lru_cache(maxsize=4096)
def _to_units(resource: str, value: str | int | float) -> int:
    # cached: a cluster repeats a handful of quantity strings ("100m", "64Mi") across every pod
    amount = parse_quantity(value)
    if resource == CPU:
        amount *= 1000
    return math.ceil(amount)


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
    return {k: v for k, v in total.items() if v}


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
