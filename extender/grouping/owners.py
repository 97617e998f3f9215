"""The owner chain: from a pod up through controller owner references, as far as owners can be read."""

from __future__ import annotations

import dataclasses
from typing import Any

from extender.grouping.base import ObjectLookup
from extender.model.keys import api_group

MAX_OWNER_DEPTH = 16  # a chain deeper than this is a cycle or a misconfiguration


@dataclasses.dataclass(frozen=True)
class OwnerChain:
    """`owners` nearest first; `top` is the last readable owner, or the pod itself when it has none."""

    pod: dict[str, Any]
    owners: tuple[dict[str, Any], ...]
    missing: dict[str, Any] | None = None
    """The reference to the owner the walk could not read (absent, or another object under its name),
    where it ended; None when it ended at an object without a controller."""

    @property
    def top(self) -> dict[str, Any]:
        return self.owners[-1] if self.owners else self.pod


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def labels(obj: dict[str, Any]) -> dict[str, str]:
    v = meta(obj).get("labels")
    return v if isinstance(v, dict) else {}


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    v = meta(obj).get("annotations")
    return v if isinstance(v, dict) else {}


def kind_of(obj: dict[str, Any]) -> tuple[str, str]:
    """(API group, kind) of an object."""
    return api_group(str(obj.get("apiVersion", ""))), str(obj.get("kind", ""))


def controller_ref(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The controller owner reference; KAI falls back to the first reference, and so do we."""
    refs = meta(obj).get("ownerReferences")
    if not isinstance(refs, list) or not refs:
        return None
    refs = [r for r in refs if isinstance(r, dict)]
    for ref in refs:
        if ref.get("controller") is True:
            return ref
    return refs[0] if refs else None


def walk_owners(pod: dict[str, Any], lookup: ObjectLookup) -> OwnerChain:
    """Follow controller references upward; an owner that cannot be read (absent, forbidden, or
    recreated under another UID) ends the walk there."""
    owners: list[dict[str, Any]] = []
    namespace = meta(pod).get("namespace")
    current = pod
    seen: set[tuple[str, str, str]] = set()
    missing = None
    for _ in range(MAX_OWNER_DEPTH):
        ref = controller_ref(current)
        if ref is None:
            break
        group = api_group(str(ref.get("apiVersion", "")))
        kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
        if (group, kind, name) in seen:
            break
        seen.add((group, kind, name))
        owner = lookup.get(group, kind, namespace, name)
        if owner is None:
            missing = ref
            break
        ref_uid, owner_uid = ref.get("uid"), meta(owner).get("uid")
        if ref_uid and owner_uid and ref_uid != owner_uid:
            missing = ref
            break  # same name, different object: the one the pod belonged to is gone
        owners.append(owner)
        current = owner
    return OwnerChain(pod=pod, owners=tuple(owners), missing=missing)
