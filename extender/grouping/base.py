"""The inputs grouping reads: a read-only object lookup, and the error an invalid workload raises.

Grouping is pure: everything it knows about the cluster comes through `ObjectLookup`, which the
cluster cache (or, for `podgroups -f FILE`, the other objects in the file) provides.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterable, Iterator
from typing import Any, Protocol

from extender.model.keys import api_group


class ObjectLookup(Protocol):
    def children(self, group: str, kind: str, namespace: str, parent: str) -> list[dict]:
        """The objects of the kind whose spec.parentCompositePodGroupName is `parent` (1.37 trees)."""
        ...

    def get(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        """The object, or None when it is absent or cannot be read. `group` is the API group
        ("" for core); lookups ignore the version."""
        ...


def version_of(lookup: ObjectLookup, obj: dict[str, Any]) -> Hashable | None:
    """What identifies the version of `obj` (an object `lookup` returned) that grouping reads, for
    keeping what is derived from it; None when the lookup cannot tell (then nothing is kept). A
    lookup that can has `grouping_version(obj)`: equal only for versions whose spec, uid, labels,
    annotations and owners are equal (what is kept is keyed by kind and name too)."""
    fn = getattr(lookup, "grouping_version", None)
    return fn(obj) if fn is not None else None


class GroupingError(ValueError):
    """A workload whose grouping fields are invalid. `field` is the path of the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@contextlib.contextmanager
def named_when_malformed(field: str = "spec") -> Iterator[None]:
    """A shape no check anticipated (a template that is a string, say) raised as a GroupingError
    naming `field`: a clear refusal, never a traceback; a GroupingError passes as it is."""
    try:
        yield
    except GroupingError:
        raise
    except (TypeError, AttributeError, KeyError, ValueError) as err:
        raise GroupingError(field, f"malformed object: {err!r}") from err


class ListLookup:
    """An `ObjectLookup` over a list of objects (a manifest file, a test fixture)."""

    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        self._by_key: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
        for obj in objects:
            if not isinstance(obj, dict):
                continue
            meta = obj.get("metadata") or {}
            key = (
                api_group(str(obj.get("apiVersion", ""))),
                str(obj.get("kind", "")),
                meta.get("namespace"),
                str(meta.get("name", "")),
            )
            self._by_key[key] = obj

    def children(self, group: str, kind: str, namespace: str, parent: str) -> list[dict]:
        return [
            obj
            for (g, k, ns, _), obj in self._by_key.items()
            if (g, k) == (group, kind)
            and (ns or "default") == namespace
            and isinstance(obj.get("spec"), dict)
            and obj["spec"].get("parentCompositePodGroupName") == parent
        ]

    def get(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        found = self._by_key.get((group, kind, namespace, name))
        if found is None and namespace is not None:
            # objects read from files often omit metadata.namespace; they mean "default"
            if namespace == "default":
                found = self._by_key.get((group, kind, None, name))
        elif found is None:
            found = self._by_key.get((group, kind, "default", name))
        return found
