"""Typed keys for namespaced objects, spelled the same everywhere: "namespace/name"."""

from __future__ import annotations

from typing import Any, NewType

PodKey = NewType("PodKey", str)
GroupKey = NewType("GroupKey", str)
NodeName = NewType("NodeName", str)


def pod_key(namespace: str, name: str) -> PodKey:
    return PodKey(f"{namespace}/{name}")


def group_key(namespace: str, name: str) -> GroupKey:
    return GroupKey(f"{namespace}/{name}")


def object_key(obj: dict[str, Any]) -> str:
    """"ns/name" for a namespaced object, "name" for a cluster-scoped one."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "")
    return f"{ns}/{name}" if ns else name


def split_key(key: str) -> tuple[str, str]:
    """("ns", "name") from "ns/name"; raises ValueError naming the expected shape."""
    ns, sep, name = key.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise ValueError(f"expected NAMESPACE/NAME, got {key!r}")
    return ns, name
