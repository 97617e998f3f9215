"""The required pod anti-affinity of the pods bound in the cluster, kept as distinct terms: what
kube-scheduler's InterPodAffinity filter holds against any pod it places near them. A gang member
a plan binds without its own kube-scheduler cycle (a release at the first member's bind) must be one
no such term selects; kube-scheduler's cycle checks the others.

Owns, for each live bound pod with such terms, the keys of the terms it carries, for each distinct
(namespace, term) how many pods carry it, and the terms by one label their selector requires (so a
pod is checked against the terms that can select it, not every term in the cluster). Fed by the
store's events; rebuilt from the store when made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from extender.model.keys import PodKey, pod_key
from extender.model.podaffinity import selector_matches
from extender.state.store import POD, ClusterStore, is_live

_UNREADABLE = b"?"  # a term too odd to encode: held against every pod (kube-scheduler would judge it)


class Repelling:
    def __init__(self, store: ClusterStore) -> None:
        self._by_pod: dict[PodKey, tuple[bytes, ...]] = {}
        self._terms: dict[bytes, tuple[int, str, Mapping[str, Any] | None]] = {}
        self._anchored: dict[tuple[str, str], set[bytes]] = {}  # a label a term's selector requires
        self._loose: set[bytes] = set()  # terms no single label anchors: checked against every pod
        store.add_listener(self._on_change)
        for rec in list(store.pods.values()):
            self._note(rec.key, rec.obj)

    def __len__(self) -> int:
        """How many distinct terms are held."""
        return len(self._terms)

    def _on_change(self, event: str, kind: tuple[str, str], obj: dict[str, Any]) -> None:
        if kind != POD:
            return
        meta = obj.get("metadata") or {}
        key = pod_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        self._forget(key)
        if event != "DELETED":
            self._note(key, obj)

    def _note(self, key: PodKey, pod: dict[str, Any]) -> None:
        spec = pod.get("spec")
        if not isinstance(spec, Mapping) or not spec.get("nodeName") or not is_live(pod):
            return
        affinity = spec.get("affinity")
        anti = affinity.get("podAntiAffinity") if isinstance(affinity, Mapping) else None
        terms = (
            anti.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(anti, Mapping) else None
        )
        if not isinstance(terms, list) or not terms:
            return
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        keys = []
        for term in terms:
            readable = term if isinstance(term, Mapping) else None
            try:
                k = (
                    orjson.dumps([namespace, term], option=orjson.OPT_SORT_KEYS)
                    if readable is not None
                    else _UNREADABLE
                )
            except orjson.JSONEncodeError:
                k, readable = _UNREADABLE, None
            count, _, _ = self._terms.get(k, (0, namespace, readable))
            self._terms[k] = (count + 1, namespace, readable)
            if count == 0:
                self._index(k, readable)
            keys.append(k)
        self._by_pod[key] = tuple(keys)

    def _forget(self, key: PodKey) -> None:
        for k in self._by_pod.pop(key, ()):
            count, namespace, term = self._terms[k]
            if count > 1:
                self._terms[k] = (count - 1, namespace, term)
            else:
                del self._terms[k]
                anchor = _anchor(term)
                if anchor is None:
                    self._loose.discard(k)
                else:
                    held = self._anchored[anchor]
                    held.discard(k)
                    if not held:
                        del self._anchored[anchor]

    def _index(self, k: bytes, term: Mapping[str, Any] | None) -> None:
        anchor = _anchor(term)
        if anchor is None:
            self._loose.add(k)
        else:
            self._anchored.setdefault(anchor, set()).add(k)

    def against(self, pod: Mapping[str, Any]) -> str:
        """Why a bound pod's required anti-affinity may keep kube-scheduler from placing `pod` near it
        ("" when no term selects it). Wherever the term's pods are: kube-scheduler judges the topology."""
        if not self._terms:
            return ""
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        labels = labels if isinstance(labels, Mapping) else {}
        namespace = str(meta.get("namespace") or "default") if isinstance(meta, Mapping) else "default"
        keys = set(self._loose)
        for label in labels.items():
            keys.update(self._anchored.get(label, ()))
        for k in keys:
            _, term_namespace, term = self._terms[k]
            if term is None:
                return "a bound pod's required anti-affinity could not be read"
            if term.get("namespaceSelector") is None:  # else: any namespace may be selected
                listed = term.get("namespaces")
                if namespace not in (listed if isinstance(listed, list) and listed else [term_namespace]):
                    continue
            try:
                selects = selector_matches(term.get("labelSelector"), labels)
            except (TypeError, AttributeError, ValueError):  # a selector of another shape
                return "a bound pod's required anti-affinity could not be read"
            if selects:
                return "a bound pod's required anti-affinity selects it"
        return ""


def _anchor(term: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """One label (key, value) a pod must carry for the term's selector to select it, if any."""
    selector = term.get("labelSelector") if term is not None else None
    required = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    if not isinstance(required, Mapping):
        return None
    for key, value in sorted(required.items(), key=lambda kv: str(kv[0])):
        if isinstance(key, str) and isinstance(value, str):
            return key, value
    return None
