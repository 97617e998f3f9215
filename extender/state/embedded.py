"""EmbeddedCluster: a cluster held in memory, loaded from a file, for `serve --cluster` and `simulate`.

It plays the API server's part for the service: it keeps the objects, stamps uid,
resourceVersion and creationTimestamp as the API server would, feeds the ClusterStore, and performs
the service's writes (a bind sets the pod's spec.nodeName; conditions, events, nudges and group
status land on the objects). Unknown kinds are kept and ignored by the decisions.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import yaml

from extender.model.keys import object_uid
from extender.state.projection import project
from extender.state.source import BindError, SkippedObjects
from extender.state.store import ClusterStore, Kind, key_of, kind_of

log = logging.getLogger(__name__)


class ClusterFileError(ValueError):
    """A cluster file that cannot be loaded; the message names the file and the document."""


def load_objects(path: str) -> list[dict[str, Any]]:
    """Objects from a YAML stream (documents may be `List`s) or a JSON `List`."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ClusterFileError(f"{path}: cannot read: {exc.strerror}") from None
    docs: list[Any]
    if text.lstrip().startswith(("{", "[")):
        # JSON is YAML too, but orjson reads a 15k-node List in ~0.1 s where PyYAML takes many seconds
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ClusterFileError(f"{path}: not valid JSON: {exc}") from None
        docs = doc if isinstance(doc, list) else [doc]
    else:
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise ClusterFileError(f"{path}: not valid YAML: {exc}") from None
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ClusterFileError(f"{path}: document {i + 1} is not a Kubernetes object (a mapping)")
        items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else None
        for j, obj in enumerate(items if items is not None else [doc]):
            where = f"{path}: document {i + 1}" + (f" item {j + 1}" if items is not None else "")
            if not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion"):
                raise ClusterFileError(f"{where}: every object needs apiVersion and kind")
            if not (obj.get("metadata") or {}).get("name"):
                raise ClusterFileError(f"{where}: {obj['kind']} has no metadata.name")
            out.append(obj)
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EmbeddedCluster:
    """The in-memory API server. Implements `state.source.ClusterSource`."""

    bind_fence_s = 0.0  # the cluster lives and dies with this process: no predecessor binds into it

    def __init__(self, objects: Iterable[dict[str, Any]] = ()) -> None:
        self._objects: dict[Kind, dict[str, dict[str, Any]]] = {}
        self._deleted: set[tuple[Kind, str]] = set()
        self._rv = itertools.count(1)
        self._listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self._store: ClusterStore | None = None
        self._synced = False
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=10_000)
        """The newest Events, as an API server would keep them for a while; bounded so a long
        `serve --cluster` with gangs retrying does not grow without end."""
        self.skipped = SkippedObjects()
        for obj in objects:
            self.apply(obj)

    @classmethod
    def from_file(cls, path: str) -> EmbeddedCluster:
        return cls(load_objects(path))

    # ----------------------------------------------------------------- objects
    def add_listener(self, fn: Callable[[str, dict[str, Any]], None]) -> None:
        """fn(event, obj) after every change, with event ADDED, MODIFIED or DELETED."""
        self._listeners.append(fn)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace `obj`, stamping what the API server would; returns the stored object."""
        obj = orjson.loads(orjson.dumps(obj))  # own a deep copy; callers keep theirs
        meta = obj.setdefault("metadata", {})
        bucket = self._objects.setdefault(kind_of(obj), {})
        key = key_of(obj)
        old = bucket.get(key)
        if old is not None:
            meta.setdefault("uid", old["metadata"]["uid"])
            meta.setdefault("creationTimestamp", old["metadata"].get("creationTimestamp"))
        elif (kind_of(obj), key) in self._deleted:
            # recreated under its old name: a new object, as the API server would make it
            meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("uid", object_uid(obj))  # stable for objects first loaded from a file
        meta.setdefault("creationTimestamp", _now())
        meta["resourceVersion"] = str(next(self._rv))
        bucket[key] = obj
        self._emit("MODIFIED" if old is not None else "ADDED", obj)
        return obj

    def delete(self, group: str, kind: str, namespace: str | None, name: str) -> bool:
        key = f"{namespace}/{name}" if namespace else name
        obj = self._objects.get((group, kind), {}).pop(key, None)
        if obj is None:
            return False
        self._deleted.add(((group, kind), key))
        self._emit("DELETED", obj)
        return True

    def get(self, group: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        key = f"{namespace}/{name}" if namespace else name
        return self._objects.get((group, kind), {}).get(key)

    def list(self, group: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        objs = list(self._objects.get((group, kind), {}).values())
        if namespace is not None:
            objs = [o for o in objs if (o.get("metadata") or {}).get("namespace") == namespace]
        return objs

    def all_objects(self) -> list[dict[str, Any]]:
        return [o for bucket in self._objects.values() for o in bucket.values()]

    def _emit(self, event: str, obj: dict[str, Any]) -> None:
        if self._store is not None:
            self._feed(self._store.remove if event == "DELETED" else self._store.upsert, obj)
        for fn in self._listeners:
            fn(event, obj)

    def _feed(self, op: Callable[[dict[str, Any]], None], obj: dict[str, Any]) -> None:
        """`op(obj)` (store.upsert or store.remove); an object the store cannot take is skipped (it
        stays here): one bad object never stops the source. The store gets its projection: this
        cluster keeps the whole object, as an API server does."""
        self.skipped.apply(op, project(obj), kind_of(obj)[1])

    @property
    def bad_objects(self) -> int:
        """Objects the store could not apply (each skipped and logged once), as on the live source."""
        return self.skipped.count

    @property
    def last_bad_object(self) -> str:
        return self.skipped.last

    def _touch(self, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._emit("MODIFIED", obj)

    # ----------------------------------------------------------------- ClusterSource
    def attach(self, store: ClusterStore) -> None:
        """Feed `store` with everything now and every change from here on."""
        self._store = store
        for obj in self.all_objects():
            self._feed(store.upsert, obj)
        self._synced = True

    async def run(self, store: ClusterStore) -> None:
        self.attach(store)
        await asyncio.Event().wait()  # changes are pushed synchronously; nothing to poll

    def is_synced(self) -> bool:
        return self._synced

    async def bind_pod(
        self, *, namespace: str, name: str, uid: str, node: str, persist_s: float = 0.0
    ) -> None:
        pod = self.get("", "Pod", namespace, name)
        if pod is None:
            raise BindError(f'pods "{name}" not found in namespace {namespace}')
        if uid and pod["metadata"].get("uid") != uid:
            raise BindError(f"pod {namespace}/{name} has uid {pod['metadata'].get('uid')}, not {uid}")
        if self.get("", "Node", None, node) is None:
            raise BindError(f'node "{node}" not found')
        current = (pod.get("spec") or {}).get("nodeName")
        if current:
            if current == node:
                return  # the API answers 409 here; binding to the same node is success
            raise BindError(f"pod {namespace}/{name} is already assigned to node {current}")
        pod.setdefault("spec", {})["nodeName"] = node
        self._set_condition(pod, {"type": "PodScheduled", "status": "True"})
        self._touch(pod)

    async def set_pod_condition(self, *, namespace: str, name: str, condition: dict[str, Any]) -> None:
        pod = self.get("", "Pod", namespace, name)
        if pod is not None:
            self._set_condition(pod, condition)
            self._touch(pod)

    @staticmethod
    def _set_condition(pod: dict[str, Any], condition: dict[str, Any]) -> None:
        conds = pod.setdefault("status", {}).setdefault("conditions", [])
        conds[:] = [c for c in conds if c.get("type") != condition.get("type")]
        conds.append({"lastTransitionTime": _now(), **condition})

    async def emit_event(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        kind: str,
        reason: str,
        message: str,
        event_type: str = "Normal",
        api_version: str = "",
    ) -> None:
        involved = {"kind": kind, "namespace": namespace, "name": name, "uid": uid}
        if api_version:
            involved["apiVersion"] = api_version
        self.events.append(
            {
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "type": event_type,
                "lastTimestamp": _now(),
            }
        )

    async def nudge_pod(self, *, namespace: str, name: str, value: str) -> None:
        pod = self.get("", "Pod", namespace, name)
        if pod is not None and not (pod.get("spec") or {}).get("nodeName"):
            pod["metadata"].setdefault("annotations", {})["gang-extender.io/nudge"] = value
            self._touch(pod)

    async def patch_group_status(
        self, *, group: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        obj = self.get(group, kind, namespace, name)
        if obj is not None:
            merge_patch(obj, {"status": status})
            self._touch(obj)

    async def create_object(self, *, group: str, kind: str, obj: dict[str, Any]) -> bool:
        m = obj.get("metadata") or {}
        if self.get(group, kind, m.get("namespace"), str(m.get("name", ""))) is None:
            self.apply(obj)
        return True  # created, or already there (the API's 409 AlreadyExists)

    async def patch_object(
        self, *, group: str, kind: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> bool:
        obj = self.get(group, kind, namespace, name)
        if obj is not None:
            merge_patch(obj, patch)
            self._touch(obj)
        return True

    async def delete_object(self, *, group: str, kind: str, namespace: str, name: str, uid: str) -> bool:
        obj = self.get(group, kind, namespace, name)
        if obj is not None and (not uid or obj["metadata"].get("uid") == uid):
            self.delete(group, kind, namespace, name)
        return True

    async def evict_pod(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        """No kubelet and no budgets here: an eviction removes the pod at once."""
        pod = self.get("", "Pod", namespace, name)
        if pod is not None and (not uid or pod["metadata"].get("uid") == uid):
            self.delete("", "Pod", namespace, name)
        return True


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place: None removes a key, mappings merge, the rest replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            if not isinstance(target.get(key), dict):
                target[key] = {}
            merge_patch(target[key], value)
        else:
            target[key] = orjson.loads(orjson.dumps(value)) if isinstance(value, list) else value
