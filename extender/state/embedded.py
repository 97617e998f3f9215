"""EmbeddedCluster: a cluster held in memory, loaded from a file, for `serve --cluster` and `simulate`.

It plays the API server's part for the service: it keeps the objects, stamps uid,
resourceVersion and creationTimestamp as the API server would, feeds the ClusterStore, and performs
the service's writes (a bind sets the pod's spec.nodeName; conditions, events, nudges and group
status land on the objects). Unknown kinds are kept and ignored by the decisions.

A cluster loaded from a file (`from_file`: `serve --cluster`, 150,000 pods in the largest) keeps
what a live source's store keeps, by the same code: each pod and node decoded into the fields the
store keeps (`projection.item_decoder`, the decoder of the live list's pages, never building the
rest), every object projected, and pods kept compact (`store.PodRecord`, whose templates the
store's own records share). Its objects then lack what no decision reads (managedFields, images, a
bound pod's PodScheduled=True, a pod's resourceVersion); each pod read is a copy of its own.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import functools
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any, TypedDict

import msgspec
import orjson
import yaml

from extender.model.keys import PodKey, api_group, object_uid
from extender.state import heap
from extender.state.projection import item_decoder, project
from extender.state.source import BindError, SkippedObjects
from extender.state.store import POD, ClusterStore, Kind, PodRecord, key_of, kind_of

log = logging.getLogger(__name__)


class ClusterFileError(ValueError):
    """A cluster file that cannot be loaded; the message names the file and the document."""


_RawList = msgspec.json.Decoder(
    TypedDict("RawList", {"kind": Any, "items": list[msgspec.Raw]}, total=False)  # type: ignore[misc]
)
_RawArray = msgspec.json.Decoder(list[msgspec.Raw])
_RawOne = msgspec.json.Decoder(msgspec.Raw)  # checks the JSON, keeps it undecoded
_Head = msgspec.json.Decoder(TypedDict("Head", {"apiVersion": Any, "kind": Any}, total=False))  # type: ignore[misc]


def _projected(item: msgspec.Raw) -> Any:
    """One JSON object of a cluster file as the store keeps it: a core pod or node decoded into the
    kept fields alone, anything else decoded whole, then projected; a `List` with its items so."""
    try:
        head = _Head.decode(item)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return orjson.loads(memoryview(item))  # not an object: _checked says so
    kind = str(head.get("kind", ""))
    if kind.endswith("List"):
        try:
            doc = _RawList.decode(item)
        except msgspec.ValidationError:  # its items are not a list: _checked says so
            return orjson.loads(memoryview(item))
        if "items" in doc:
            return {**doc, "items": [_projected(i) for i in doc["items"]]}
        # no items: an object whose kind ends so (a CRD's), or a List _checked refuses
    decode = item_decoder(kind) if not api_group(str(head.get("apiVersion", ""))) else None
    obj = decode(item) if decode is not None else None
    return project(obj if obj is not None else orjson.loads(memoryview(item)))


def _projected_docs(raw: bytes) -> Iterator[Any] | None:
    """The documents of a JSON cluster file (an object, a `List` or an array of them), each projected
    (`_projected`) as it is reached; None when `raw` is not valid JSON (decoded again to say where)."""
    try:
        top = _RawArray.decode(raw) if raw.lstrip().startswith(b"[") else [_RawOne.decode(raw)]
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    return (_projected(item) for item in top)


def _guarded(path: str, objects: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """`objects`, a decoding error met on the way (a string that is not UTF-8, say) said as the file's."""
    try:
        yield from objects
    except (orjson.JSONDecodeError, msgspec.DecodeError) as exc:
        raise ClusterFileError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise ClusterFileError(f"{path}: nested too deeply to read") from None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ClusterFileError(f"{path}: cannot read: {exc.strerror}") from None


def load_objects(path: str, *, projected: bool = False) -> list[dict[str, Any]]:
    """Objects from a YAML stream (documents may be `List`s) or a JSON `List`. `projected`: what the
    store keeps of each (see the module's docstring)."""
    return list(projected_objects(path)) if projected else _parsed(path, _read(path))


def projected_objects(path: str) -> Iterator[dict[str, Any]]:
    """What the store keeps of each object in `path`, one at a time: the pods and nodes of a JSON file
    are never decoded whole, nor all alive at once."""
    raw = _read(path)
    if raw.lstrip().startswith((b"{", b"[")):
        docs = _projected_docs(raw)
        if docs is not None:
            return _guarded(path, _checked(path, docs))
    # what YAML made (datetimes, aliases shared between objects) made JSON's, as `apply` would
    return (project(orjson.loads(orjson.dumps(o))) for o in _parsed(path, raw))


def _parsed(path: str, raw: bytes) -> list[dict[str, Any]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClusterFileError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    del raw
    docs: list[Any]
    if text.lstrip().startswith(("{", "[")):
        # JSON is YAML too, but orjson reads a 15k-node List in ~0.1 s where PyYAML takes many seconds
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ClusterFileError(f"{path}: not valid JSON: {exc}") from None
        except RecursionError:
            raise ClusterFileError(f"{path}: nested too deeply to read") from None
        docs = doc if isinstance(doc, list) else [doc]
    else:
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise ClusterFileError(f"{path}: not valid YAML: {exc}") from None
        except RecursionError:
            raise ClusterFileError(f"{path}: nested too deeply to read") from None
    return list(_checked(path, docs))


def _checked(path: str, docs: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """The objects of `docs` (`List`s unpacked), each with apiVersion, kind and a name, or the error
    naming the document."""
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ClusterFileError(f"{path}: document {i + 1} is not a Kubernetes object (a mapping)")
        items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else None
        if items is not None and not isinstance(items, list):
            raise ClusterFileError(f"{path}: document {i + 1}: {doc['kind']}'s items is not a list")
        for j, obj in enumerate(items if items is not None else [doc]):
            where = f"{path}: document {i + 1}" + (f" item {j + 1}" if items is not None else "")
            if not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion"):
                raise ClusterFileError(f"{where}: every object needs apiVersion and kind")
            meta = obj.get("metadata")
            if not isinstance(meta, dict) or not meta.get("name"):
                raise ClusterFileError(f"{where}: {obj['kind']} has no metadata.name")
            yield obj


_stamp: tuple[int, str] = (-1, "")


def _now() -> str:
    """The API server's timestamp, to the second (formatted once a second: a file's 150,000 pods
    would spend more here than in their projection)."""
    global _stamp
    second = int(time.time())
    if _stamp[0] != second:
        when = datetime.datetime.fromtimestamp(second, datetime.UTC)
        _stamp = (second, when.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _stamp[1]


def without_resource_version(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as a shallow copy without its resourceVersion (each object's own: in a compact pod's
    shared parts it would make every template differ); `obj` itself when it has none."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "resourceVersion" in meta:
        return {**obj, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
    return obj


class _CompactPods(MutableMapping[str, dict[str, Any]]):
    """Projected pods by key, kept as the store keeps them: in `PodRecord`s whose parts are shared
    templates, without the resourceVersion (each pod's own: it would make every template differ).
    Each read is a copy of its own (a write to it never reaches another pod's template); a write is
    stored again (EmbeddedCluster._touch)."""

    def __init__(self) -> None:
        self._recs: dict[str, PodRecord] = {}

    def __getitem__(self, key: str) -> dict[str, Any]:
        return orjson.loads(orjson.dumps(self._recs[key].obj))

    def __setitem__(self, key: str, pod: dict[str, Any]) -> None:
        pod = without_resource_version(pod)
        rec = PodRecord(PodKey(key), pod, {})
        rec.keep(pod)
        self._recs[key] = rec

    def __delitem__(self, key: str) -> None:
        del self._recs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._recs)

    def __len__(self) -> int:
        return len(self._recs)

    def records(self) -> Iterator[PodRecord]:
        """Each pod's record: the store keeps its own copy of one (`PodRecord.keep(like=)`)."""
        return iter(self._recs.values())


class EmbeddedCluster:
    """The in-memory API server. Implements `state.source.ClusterSource`."""

    bind_fence_s = 0.0  # the cluster lives and dies with this process: no predecessor binds into it

    def __init__(self, objects: Iterable[dict[str, Any]] = (), *, compact: bool = False) -> None:
        self._objects: dict[Kind, MutableMapping[str, dict[str, Any]]] = {}
        self._compact = compact
        if compact:
            self._objects[POD] = _CompactPods()
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
        """The cluster in `path`, kept as a live source's store keeps it (the module's docstring)."""
        cluster = cls(compact=True)
        for obj in projected_objects(path):  # each kept as it is decoded: no copy, none waiting
            cluster._put(obj, projected=True)
        return cluster

    # ----------------------------------------------------------------- objects
    def add_listener(self, fn: Callable[[str, dict[str, Any]], None]) -> None:
        """fn(event, obj) after every change, with event ADDED, MODIFIED or DELETED."""
        self._listeners.append(fn)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace `obj`, stamping what the API server would; returns the stored object."""
        return self._put(orjson.loads(orjson.dumps(obj)))  # own a deep copy; callers keep theirs

    def _put(self, obj: dict[str, Any], *, projected: bool = False) -> dict[str, Any]:
        if self._compact and not projected:
            obj = project(obj)
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
        cluster keeps the whole object, as an API server does (a compact one's pods are projected
        already, and the store keeps its own record of each)."""
        kind = kind_of(obj)
        if self._compact and kind == POD:  # projected already; the store's record keeps no resourceVersion
            obj = without_resource_version(obj)
        else:
            obj = project(obj)
        self.skipped.apply(op, obj, kind[1])

    @property
    def bad_objects(self) -> int:
        """Objects the store could not apply (each skipped and logged once), as on the live source."""
        return self.skipped.count

    @property
    def last_bad_object(self) -> str:
        return self.skipped.last

    def _touch(self, obj: dict[str, Any]) -> None:
        if self._compact:
            obj = project(obj)  # what the write added that no decision reads (PodScheduled=True) goes
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._objects[kind_of(obj)][key_of(obj)] = obj  # a compact pod's read was a copy: store it again
        self._emit("MODIFIED", obj)

    # ----------------------------------------------------------------- ClusterSource
    def attach(self, store: ClusterStore) -> None:
        """Feed `store` with everything now and every change from here on."""
        self._store = store
        for bucket in self._objects.values():
            if isinstance(bucket, _CompactPods):
                # the store copies each compact record's shared parts rather than work them out again
                for rec in bucket.records():
                    self._feed(functools.partial(store.upsert, like=rec), rec.obj)
                continue
            for obj in bucket.values():
                self._feed(store.upsert, obj)
        self._synced = True

    async def run(self, store: ClusterStore) -> None:
        if self._store is not store:  # build_app attached it already: feeding it twice is twice the work
            self.attach(store)
        heap.settle()  # as the live source does once listed: the load's garbage collected, pages given back
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
    ) -> bool:
        obj = self.get(group, kind, namespace, name)
        if obj is not None:
            merge_patch(obj, {"status": status})
            self._touch(obj)
        return True

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
