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


_SINGLE = "pod:"  # no object's name holds a colon: a group of one's key never names a gang


def single_pod_key(namespace: str, name: str) -> GroupKey:
    """A group of one's key, `ns/pod:NAME`: a pod may share its name with a PodGroup, in no gang."""
    return group_key(namespace, f"{_SINGLE}{name}")


def single_pod_of(group: str) -> PodKey | None:
    """The pod whose group of one `group` is (`ns/pod:NAME` -> `ns/NAME`), else None."""
    ns, _, name = group.partition("/")
    return PodKey(f"{ns}/{name.removeprefix(_SINGLE)}") if name.startswith(_SINGLE) else None


def shown(group: str) -> str:
    """A group's key as an operator reads it: `pod ns/NAME` for a group of one, else the key."""
    pod = single_pod_of(group)
    return f"pod {pod}" if pod is not None else group


def object_key(obj: dict[str, Any]) -> str:
    """ "ns/name" for a namespaced object, "name" for a cluster-scoped one."""
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


def api_group(api_version: str) -> str:
    """ "batch" from "batch/v1", "" from "v1": the group part that identifies a kind across versions."""
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def object_uid(obj: dict[str, Any]) -> str:
    """metadata.uid, or a stable stand-in for objects read from files (which have none yet).

    The stand-in is a UUID5 of kind, namespace and name, so the same file always yields the same
    derived group names (`pg-<name>-<uid>`).
    """
    meta = obj.get("metadata") or {}
    uid = meta.get("uid")
    if uid:
        return str(uid)
    import uuid

    parts = (obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))
    seed = "/".join(str(p) for p in parts)
    return str(uuid.uuid5(uuid.NAMESPACE_URL, seed))
