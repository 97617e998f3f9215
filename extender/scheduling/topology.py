"""Resolve a group's topology constraint to node label keys, through KAI Topology objects.

KAI constraints name a Topology object and a level by nodeLabel or alias; scheduling.k8s.io
constraints give the label key itself. Errors use KAI's texts so operators recognise them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from extender.model.group import GroupSpec, TopologyConstraint


class TopologyLookup(Protocol):
    def get(self, group: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None: ...


class TopologyError(ValueError):
    """The constraint names a topology or level that does not exist."""


@dataclasses.dataclass(frozen=True)
class LevelKeys:
    required: str | None  # node label key, or None
    preferred: str | None
    alias: dict[str, str]  # label key -> friendly name for messages ("rack")
    fallback: tuple[str, ...] = ()
    """Levels between preferred and required (up to the top without a required one), nearest the
    preferred first: KAI tries each in turn before spreading the group."""


def _friendly(key: str) -> str:
    tail = key.rpartition("/")[2]
    return tail.removeprefix("gke-")


def resolve(constraint: TopologyConstraint | None, lookup: TopologyLookup) -> LevelKeys:
    """The constraint's label keys. Over a lookup that knows the nodes (the store's `carries_label`):
    a required key no node has is an error saying so (no node is in any domain of it: the gang
    fits nowhere, for want of the label, not of room), and a preferred or fallback one is dropped
    (soft). Neither is made a level of the cluster's arrays: a hostile group naming thousands of
    keys would add a level each, walked by every node update for good."""
    keys = _resolve(constraint, lookup)
    carries = getattr(lookup, "carries_label", None)
    if carries is None or not (keys.required or keys.preferred):
        return keys
    if keys.required and not carries(keys.required):
        shown = keys.required if len(keys.required) <= 100 else keys.required[:100] + "..."
        raise TopologyError(
            f"no node has the label {shown!r} its required topology level names: it fits nowhere until "
            "nodes carry it"
        )
    preferred = keys.preferred if keys.preferred and carries(keys.preferred) else None
    fallback = tuple(k for k in keys.fallback if carries(k))
    if preferred == keys.preferred and fallback == keys.fallback:
        return keys
    return dataclasses.replace(keys, preferred=preferred, fallback=fallback)


def _resolve(constraint: TopologyConstraint | None, lookup: TopologyLookup) -> LevelKeys:
    if constraint is None or constraint.is_empty():
        return LevelKeys(None, None, {})
    if constraint.topology is None:
        keys = {k: _friendly(k) for k in (constraint.required_level, constraint.preferred_level) if k}
        return LevelKeys(constraint.required_level, constraint.preferred_level, keys)
    topo = lookup.get("kai.scheduler", "Topology", None, constraint.topology)
    if topo is None:
        raise TopologyError(f"Requested topology {constraint.topology} does not exist")
    levels = (topo.get("spec") or {}).get("levels") or []
    by_name: dict[str, str] = {}
    alias: dict[str, str] = {}
    for level in levels:
        key = level.get("nodeLabel")
        if not key:
            continue
        by_name[key] = key
        if level.get("alias"):
            by_name[level["alias"]] = key
        alias[key] = level.get("alias") or _friendly(key)

    def find(name: str | None) -> str | None:
        if name is None:
            return None
        if name not in by_name:
            raise TopologyError(f"topology {constraint.topology} has no level {name!r}")
        return by_name[name]

    required, preferred = find(constraint.required_level), find(constraint.preferred_level)
    order = [level["nodeLabel"] for level in levels if level.get("nodeLabel")]  # top to bottom
    fallback: tuple[str, ...] = ()
    if preferred is not None:
        top = order.index(required) + 1 if required is not None else 0
        below = order.index(preferred)
        if top > below:
            raise TopologyError(
                f"topology {constraint.topology}: preferred level {constraint.preferred_level!r} is above "
                f"required level {constraint.required_level!r}; the preferred level must be the narrower one"
            )
        fallback = tuple(reversed(order[top:below]))
    return LevelKeys(required, preferred, alias, fallback)


def _chain(group: GroupSpec, leaf: str | None) -> list[tuple[str | None, TopologyConstraint | None]]:
    """The constraints on `leaf` and each of its ancestors, the root's (None) last."""
    out: list[tuple[str | None, TopologyConstraint | None]] = []
    node = group.subgroup(leaf) if leaf else None
    while node is not None:
        out.append((node.name, node.topology))
        node = group.subgroup(node.parent) if node.parent else None
    out.append((None, group.topology))
    return out


def required_keys(group: GroupSpec, leaf: str | None, lookup: TopologyLookup) -> list[str]:
    """The label keys a member of `leaf` must share with the rest: its own required level and each
    ancestor's, up to the root."""
    return [k for _, k in required_chain(group, leaf, lookup)]


def required_chain(
    group: GroupSpec, leaf: str | None, lookup: TopologyLookup
) -> list[tuple[str | None, str]]:
    """(subgroup, required key) for `leaf` and each ancestor that requires a level, the root's (None)
    last: a member of `leaf` shares each key with the members under that subgroup."""
    return [(name, k) for name, c in _chain(group, leaf) if (k := resolve(c, lookup).required)]


def ancestry(group: GroupSpec, leaf: str | None) -> list[str | None]:
    """`leaf` and each subgroup it sits under, the root (None) last; no constraint is resolved."""
    return [name for name, _ in _chain(group, leaf)]
