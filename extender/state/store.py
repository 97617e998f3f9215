"""ClusterStore: the in-memory cluster the decisions read.

It owns:
- every object a source delivered, by (API group, kind) and "ns/name" (the grouping lookup);
- node rows in `placement.layout.ClusterArrays` (free capacity, labels as topology domains), kept
  current incrementally: a pod bound or gone, a node changed, a reservation made or released;
- pod accounting: requests of bound pods and of holds come off `free`. Holds (capacity promised
  to a planned or binding pod) are stored here, keyed by resource name, but only the gang ledger
  (scheduling.ledger) makes or drops them: it turns a hold into the bound pod's own charge when
  the watch shows the pod bound, so capacity is never counted twice;
- resource columns: only nodes add them (a device plugin registering a resource). A request
  for a name no node offers adds nothing: it fits nowhere (`request_vector` reports it). When a
  column appears, bound pods and holds that ask for it are charged in it at once;
- each pod's gang membership, derived and indexed as the pod arrives or changes, and kept with what
  it read: a change to a workload or group object re-derives the pods that read it, no other (a
  workload's tree is derived once per version, in grouping); a group of one (a plain pod) is derived
  on demand and neither kept nor indexed. Live members and Succeeded ones are indexed apart: the
  latter only count toward quorum (`finished_counts`, which reads the Jobs' and PodGroups'
  `status.succeeded` for members already deleted).

It does no I/O and never awaits; sources call `upsert`/`remove`, and after a (re)list `remove` what
`unlisted` names.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import orjson

from extender import grouping
from extender.grouping.owners import controller_ref
from extender.model import nodematch, podaffinity, resources
from extender.model.cycle import cycle_needed
from extender.model.group import GroupSpec, Membership, MembershipState, Source
from extender.model.keys import GroupKey, PodKey, api_group, object_key, pod_key, single_pod_of
from extender.model.labels import DEFAULT_SCHEDULER_NAME
from extender.model.priority import member_priority, pod_priority
from extender.placement import NameIndex, index_names, rows_of_names
from extender.placement.layout import ClusterArrays
from extender.state.projection import shared, sized

log = logging.getLogger(__name__)

Kind = tuple[str, str]  # (API group, kind)
NODE: Kind = ("", "Node")
POD: Kind = ("", "Pod")
JOB: Kind = ("batch", "Job")
# Kinds whose change can alter a pod's gang; any of them bumps the grouping generation.
GROUPING_KINDS = frozenset(
    {
        ("batch", "Job"),
        ("jobset.x-k8s.io", "JobSet"),
        ("kubeflow.org", "PyTorchJob"),
        ("scheduling.run.ai", "PodGroup"),
        ("scheduling.k8s.io", "PodGroup"),
        ("scheduling.k8s.io", "Workload"),
        ("scheduling.k8s.io", "CompositePodGroup"),
        ("kai.scheduler", "Topology"),
    }
)
# The kinds of a 1.37 CompositePodGroup tree's nodes, indexed by the parent they name.
TREE_KINDS = frozenset({("scheduling.k8s.io", "PodGroup"), ("scheduling.k8s.io", "CompositePodGroup")})


def children_ref(kind: Kind, namespace: str, parent: str) -> tuple[Kind, str]:
    """What a pod that listed `parent`'s children of `kind` read: regrouped when that list changes."""
    return ((kind[0], kind[1] + "@children"), f"{namespace}/{parent}")


def _parent(obj: dict[str, Any]) -> str | None:
    spec = obj.get("spec")
    parent = spec.get("parentCompositePodGroupName") if isinstance(spec, dict) else None
    return str(parent) if parent else None


_REQUEST_FIELDS = ("containers", "initContainers", "resources", "overhead")  # what pod_requests reads
_REQUESTS_KEPT = 4096


def kind_of(obj: dict[str, Any]) -> Kind:
    return api_group(str(obj.get("apiVersion", ""))), str(obj.get("kind", ""))


key_of = object_key


def is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def scheduler_name(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER_NAME)


MAX_RESOURCE_COLUMNS = 256
"""Distinct resource names the arrays keep a column for (cpu, memory and pods among them); a node's
names past it are taken as not offered, with a warning."""


GANG_DISRUPTED = "GangDisrupted"
"""The DisruptionTarget reason this service's whole-gang disruption writes before it evicts (and asks
again until the pod goes)."""


def disrupted_by_gang(pod: dict[str, Any]) -> bool:
    """Whether this service's whole-gang disruption marked the pod to go: its eviction is asked and
    asked again until the pod is gone, so nobody else asks it."""
    cond = disruption_condition(pod)
    return cond is not None and cond.get("reason") == GANG_DISRUPTED


def disruption_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's DisruptionTarget condition when True: someone (a gang's disruption, a preemption,
    kube-scheduler) marked it to go and asked for its eviction."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return c
    return None


def is_live(pod: dict[str, Any]) -> bool:
    """Counts toward a gang's quorum: not finished, not being deleted, not held by scheduling gates."""
    if is_terminal(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return not (pod.get("spec") or {}).get("schedulingGates")


def _count(value: Any) -> int:
    """A status counter as the API keeps it; 0 when absent or malformed."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _succeeded_of(obj: dict[str, Any]) -> int:
    """An object's `status.succeeded`; 0 when absent or malformed (a status that is not an object)."""
    status = obj.get("status")
    return _count(status.get("succeeded")) if isinstance(status, dict) else 0


_ABSENT: Any = object()  # a field the pod does not have (None is a value a field may hold)
_IN_KEY: Any = object()  # a name the record's key spells after "namespace/"
_OWN_METADATA = ("name", "namespace", "uid", "creationTimestamp")  # differ from pod to pod


_TEMPLATES_KEPT = 4096
_templates: OrderedDict[bytes, dict[str, Any]] = OrderedDict()


def _template(value: dict[str, Any]) -> dict[str, Any] | None:
    """One mapping for every equal `value` (a pod's mapping without its own fields), each part of it
    `shared`: it is no source's object. None when that copy would not equal `value` (a tuple, a
    datetime, a key that is not a string): such a pod is kept as it came."""
    try:
        encoded = orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return None
    found = _templates.get(encoded)
    if found is None:
        found = _templates[sized(encoded)] = {k: shared(v) for k, v in value.items()}
        if len(_templates) > _TEMPLATES_KEPT:
            _templates.popitem(last=False)
    else:
        _templates.move_to_end(encoded)
    return found if found == value else None


def _labels(node: dict[str, Any] | None) -> Any:
    return ((node or {}).get("metadata") or {}).get("labels")


def _taints(node: dict[str, Any] | None) -> Any:
    return ((node or {}).get("spec") or {}).get("taints")


def _may_repel(spec: dict[str, Any]) -> bool:
    """Whether a spec may hold a required pod anti-affinity term (a part of an odd shape may: the pod
    is then read whole, as it always was)."""
    affinity = spec.get("affinity")
    if not affinity:
        return False
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, dict) else affinity
    if not anti:
        return False
    return not isinstance(anti, dict) or bool(anti.get("requiredDuringSchedulingIgnoredDuringExecution"))


@dataclasses.dataclass(frozen=True, slots=True)
class _SpecFacts:
    """What the decisions read of a pod's spec alone (see ClusterStore._spec_facts)."""

    cycle: str  # model.cycle.cycle_needed
    terms: tuple[list[dict[str, Any]], Mapping[str, Any], Mapping[str, Any] | None]  # placement_terms
    sig: bytes  # the terms in JSON: eligible_mask's key
    anti: bool  # a required pod anti-affinity: one_per_node must read the pod's labels too


class PodRecord:
    """One per pod: 150,000 of them. What the store keeps of a pod is compact (`keep`): the parts
    many pods have alike (the mapping's shape, labels, owner, spec, status) in shared templates,
    with only namespace, uid, creation time and node name of its own (the name is the key's);
    `obj` builds the mapping the decisions read, equal to the one stored, on each call. A pod of
    an unexpected shape, and a record made for a pod the store does not hold, keep the mapping
    itself."""

    __slots__ = (
        "_built",
        "_created",
        "_meta",
        "_name",
        "_node",
        "_ns",
        "_spec",
        "_top",
        "_uid",
        "_whole",
        "bound_row",
        "key",
        "membership",
        "membership_fresh",
        "requests",
    )

    def __init__(
        self,
        key: PodKey,
        obj: dict[str, Any],
        requests: dict[str, int],
        bound_row: int = -1,  # row whose free capacity this pod's requests were taken from
        membership: Membership | None = None,
        membership_fresh: bool = False,
    ) -> None:
        self.key = key
        self.requests = requests
        self.bound_row = bound_row
        self.membership = membership
        self.membership_fresh = membership_fresh  # False: a workload it read changed since
        self._whole: dict[str, Any] | None = obj
        self._built: dict[str, Any] | None = None

    def keep(self, pod: dict[str, Any], *, like: PodRecord | None = None) -> None:
        """Store `pod` in compact form when its shape allows (a mapping with mapping metadata and
        spec, each template equal to its shared copy); otherwise the mapping itself.

        `like`: another source's compact record whose `obj` is `pod` (an embedded cluster's pod
        as it feeds the store): its shared parts are taken as they are, not worked out again."""
        self._whole = pod
        self._built = None
        if like is not None and like._whole is None and like._uid == (pod.get("metadata") or {}).get("uid"):
            self._whole = None
            self._top, self._meta, self._spec, self._node = like._top, like._meta, like._spec, like._node
            self._ns, self._uid, self._created = like._ns, like._uid, like._created
            self._name = like._name
            if like._name is _IN_KEY and like.key != self.key:
                self._name = like.key[len(like._ns) + 1 :] if like._ns else like.key
            return
        meta = pod.get("metadata")
        spec = pod.get("spec", _ABSENT)
        if not isinstance(meta, dict) or not (spec is _ABSENT or isinstance(spec, dict)):
            return
        own = [meta.get(f, _ABSENT) for f in _OWN_METADATA]
        meta_t = dict(meta)
        for field, value in zip(_OWN_METADATA, own, strict=True):
            if value is not _ABSENT:
                meta_t[field] = None
        node = _ABSENT
        spec_t = None
        if spec is not _ABSENT:
            node = spec.get("nodeName", _ABSENT)
            spec_t = dict(spec)
            if node is not _ABSENT:
                spec_t["nodeName"] = None
            spec_t = _template(spec_t)
            if spec_t is None:
                return
        top_t = dict(pod)
        top_t["metadata"] = None
        if spec is not _ABSENT:
            top_t["spec"] = None
        top_t, meta_t = _template(top_t), _template(meta_t)
        if top_t is None or meta_t is None:
            return
        self._whole = None
        self._top, self._meta, self._spec, self._node = top_t, meta_t, spec_t, node
        self._name, self._ns, self._uid, self._created = own
        name, ns = own[0], own[1]
        if type(name) is str and type(ns) is str and self.key == (f"{ns}/{name}" if ns else name):
            self._name = _IN_KEY  # the key spells it: one string less a pod

    @property
    def obj(self) -> dict[str, Any]:
        """The pod's mapping. A gang member's (a kept membership) is built once and kept until the
        pod changes: planning and preemption read every member's on each call of a large gang."""
        if self._whole is not None:
            return self._whole
        if self._built is not None:
            return self._built
        meta = dict(self._meta)
        if self._name is _IN_KEY:
            meta["name"] = self.key[len(self._ns) + 1 :] if self._ns else self.key
        elif self._name is not _ABSENT:
            meta["name"] = self._name
        if self._ns is not _ABSENT:
            meta["namespace"] = self._ns
        if self._uid is not _ABSENT:
            meta["uid"] = self._uid
        if self._created is not _ABSENT:
            meta["creationTimestamp"] = self._created
        pod = dict(self._top)
        pod["metadata"] = meta
        if self._spec is not None:
            spec = dict(self._spec)
            if self._node is not _ABSENT:
                spec["nodeName"] = self._node
            pod["spec"] = spec
        if self.membership is not None:
            self._built = pod
        return pod

    @obj.setter
    def obj(self, pod: dict[str, Any]) -> None:
        self._whole = pod
        self._built = None

    @property
    def uid(self) -> str:
        if self._whole is not None:
            return str((self._whole.get("metadata") or {}).get("uid", ""))
        return "" if self._uid is _ABSENT else str(self._uid)

    @property
    def node_name(self) -> str | None:
        if self._whole is not None:
            return (self._whole.get("spec") or {}).get("nodeName") or None
        return None if self._node is _ABSENT else (self._node or None)

    @property
    def terminal(self) -> bool:
        """is_terminal(obj), without building it."""
        return (self.status or {}).get("phase") in ("Succeeded", "Failed")

    @property
    def status(self) -> Any:
        """The pod's status as it came (None when it has none), without building the pod."""
        return (self._whole if self._whole is not None else self._top).get("status")

    @property
    def succeeded(self) -> bool:
        return (self.status or {}).get("phase") == "Succeeded"

    def spec_template(self) -> dict[str, Any] | None:
        """The spec it shares with the pods that have it alike (its node name aside); None when it is
        kept as it came, or has no spec."""
        return self._spec if self._whole is None else None

    @property
    def live(self) -> bool:
        """is_live(obj), without building it: the loops over every pod (preemption) ask it first."""
        if self._whole is not None or self._built is not None:
            return is_live(self.obj)
        if self.terminal or self._meta.get("deletionTimestamp"):
            return False
        return not (self._spec or {}).get("schedulingGates")

    def __repr__(self) -> str:
        return f"PodRecord(key={self.key!r}, bound_row={self.bound_row}, requests={self.requests!r})"


class _PodObjects(Mapping[str, dict[str, Any]]):
    """The store's pods by key as mappings (`objects[POD]`), built from the records on access."""

    def __init__(self, pods: dict[PodKey, PodRecord]) -> None:
        self._pods = pods

    def __getitem__(self, key: str) -> dict[str, Any]:
        return self._pods[PodKey(key)].obj

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def __iter__(self) -> Iterator[str]:
        return iter(self._pods)

    def __len__(self) -> int:
        return len(self._pods)


@dataclasses.dataclass(frozen=True)
class Reservation:
    """Capacity held on one node for a pod, by resource name: a new column never invalidates it."""

    node: str
    row: int  # -1 once the node is removed: it holds room nowhere (its row may serve another node)
    requests: dict[str, int]


class _Reads:
    """The store as a grouping lookup that notes what it was asked for (of the kinds whose change can
    alter a pod's gang), found or not: a pod waiting for its Job or PodGroup reads it too."""

    __slots__ = ("keys", "store")

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self.keys: set[tuple[Kind, str]] = set()

    def lists(self, group: str, kind: str) -> bool:
        return self.store.lists(group, kind)

    def get(self, group: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        if (group, kind) in GROUPING_KINDS:
            self.keys.add(((group, kind), f"{namespace}/{name}" if namespace else name))
        return self.store.get(group, kind, namespace, name)

    def children(self, group: str, kind: str, namespace: str, parent: str) -> list[dict[str, Any]]:
        self.keys.add(children_ref((group, kind), namespace, parent))
        found = self.store.children(group, kind, namespace, parent)
        for obj in found:  # an edit of a child (its minCount) regroups the tree's pods too
            self.keys.add(((group, kind), key_of(obj)))
        return found

    def grouping_version(self, obj: dict[str, Any]) -> bytes | None:
        return self.store.grouping_version(obj)


class ClusterStore:
    def __init__(self) -> None:
        self.objects: dict[Kind, Any] = {}  # by kind: key -> object; pods are a view of `pods`
        self.resources = resources.ResourceIndex(["nvidia.com/gpu"])
        self.arrays = ClusterArrays(
            resource_names=list(self.resources.names),
            scarce=[n for n in self.resources.names if n not in resources.CORE_RESOURCES],
        )
        self.resources.column(podaffinity.ONE_PER_NODE)
        self.arrays.add_resource(podaffinity.ONE_PER_NODE, scarce=False)
        self._tree: dict[tuple[Kind, str], set[str]] = {}  # children_ref -> child keys
        self.node_rows: dict[str, int] = {}
        self.row_names: dict[int, str] = {}
        self._name_index: NameIndex | None = None  # of row_names; None when the node set changed
        self._last_names: tuple[bytes, np.ndarray | None] = (b"", None)  # the last array mapped, by it
        self.pods: dict[PodKey, PodRecord] = {}
        self.objects[POD] = _PodObjects(self.pods)
        self.reservations: dict[PodKey, Reservation] = {}
        self.listed: frozenset[Kind] | None = None
        """The kinds the source lists (set by a live source once it has asked the API server what it
        serves); None: every kind (an embedded cluster holds what it was given, whole)."""
        self._reserved_rows: dict[int, int] = {}  # row -> how many reservations name it
        self._leaving: dict[int, set[PodKey]] = {}  # row -> its bound pods being deleted (leaving_on)
        self._marked: dict[int, set[PodKey]] = {}  # row -> its live bound pods marked to go (marked_to_go)
        self.grouping_gen = 0
        self.node_gen = 0  # bumps when any node's labels, taints or schedulability may have changed
        self.topology_gen = 0  # bumps when a known node moves to another domain of a level in use
        self.node_terms_gen = 0  # bumps when a known node's labels or taints change: whom it admits
        self.release_gen = 0  # bumps whenever capacity may have grown: a "does not fit" may be stale
        self.pods_added = 0  # bumps when a pod the store did not hold appears: a gang's quorum may exist
        self.change_gen = (
            0  # bumps on every change (an object, a hold): what was derived from it may be stale
        )
        self._object_gen = 0  # bumps when an object changes (not a hold): what objects alone decide
        self.tainted_rows: set[int] = set()  # rows with a NoSchedule/NoExecute taint
        self._unplaced: dict[str, set[PodKey]] = {}  # node name -> pods bound to it before it is known
        self._eligible_cache: dict[bytes, tuple[int, np.ndarray | None]] = {}
        self._listeners: list[Callable[[str, Kind, dict[str, Any]], None]] = []
        self._fingerprints: dict[tuple[Kind, str], bytes] = {}
        self._requests_by_spec: dict[bytes, dict[str, int]] = {}
        # id(requests) -> (the mapping, held so its id is not reused; the columns it was worked out
        # for; its read-only vector; the names no node offers)
        self._vectors: dict[int, tuple[dict[str, int], int, np.ndarray, tuple[str, ...]]] = {}
        self._plain_seen: tuple[dict[str, Any], int, bool] | None = None  # is_plain's last answer
        self._group_index: dict[GroupKey, set[PodKey]] = {}
        self._pod_group: dict[PodKey, GroupKey] = {}
        self._live_indexed: dict[PodKey, str | None] = {}  # indexed live members -> their subgroup
        self._group_live: dict[GroupKey, int] = {}
        self._leaf_live: dict[GroupKey, dict[str | None, int]] = {}  # group -> subgroup -> live members
        self._group_gen: dict[GroupKey, int] = {}  # group -> the index's stamp at its last change
        self._index_stamp = 0
        self._finished_index: dict[GroupKey, set[PodKey]] = {}  # Succeeded members, by group
        self._pod_finished: dict[PodKey, GroupKey] = {}
        self._grouped: set[PodKey] = set()  # pods not surely plain (is_single_pod False), terminal or not
        self._finished_seen: dict[GroupKey, tuple[int, GroupSpec, dict[str | None, int]]] = {}
        # namespace -> keys of its Jobs whose status counts succeeded pods: a gang whose namespace has
        # none is not walked member by member for its Jobs' counts (`finished_counts`)
        self._succeeded_jobs: dict[str, set[str]] = {}
        # id(shared spec template) -> (the template, held so its id is not reused; what is read of it)
        self._facts_by_spec: dict[int, tuple[dict[str, Any], _SpecFacts | None]] = {}
        # what each pod's membership read (grouping kinds only, hits and misses) and who read each
        # object: a change re-derives and re-indexes its readers, no other pod
        self._reads: dict[PodKey, frozenset[tuple[Kind, str]]] = {}
        self._readers: dict[tuple[Kind, str], set[PodKey]] = {}
        self._regroup_listeners: list[Callable[[PodKey], None]] = []
        self._listed_listeners: list[Callable[[Kind], None]] = []

    # ----------------------------------------------------------------- feeding
    def add_listener(self, fn: Callable[[str, Kind, dict[str, Any]], None]) -> None:
        """fn(event, kind, obj) after every change; event is ADDED, MODIFIED or DELETED."""
        self._listeners.append(fn)

    def upsert(self, obj: dict[str, Any], *, like: PodRecord | None = None) -> None:
        """Take `obj`, new or changed. `like`: for a pod, a compact record that holds exactly `obj`
        (see `PodRecord.keep`)."""
        kind = kind_of(obj)
        key = key_of(obj)
        self.change_gen += 1
        self._object_gen += 1
        if kind == POD:
            event = "MODIFIED" if key in self.pods else "ADDED"
            self._apply_pod(obj, PodKey(key), like)
        else:
            bucket = self.objects.setdefault(kind, {})
            event = "MODIFIED" if key in bucket else "ADDED"
            old = bucket.get(key)
            bucket[key] = obj
            if kind == NODE:
                self._apply_node(obj, old)
            elif kind == JOB:
                self._note_succeeded(key, obj)
            elif kind in TREE_KINDS:
                self._retree(kind, key, old, obj)
        if kind in GROUPING_KINDS and self._grouping_changed(kind, key, obj):
            self.grouping_gen += 1
            self._regroup((kind, key))
        self._notify(event, kind, obj)

    def _grouping_changed(self, kind: Kind, key: str, obj: dict[str, Any]) -> bool:
        """Whether what grouping reads of a workload or group object changed.

        Controllers rewrite a Job's status on every pod transition and we write PodGroup status
        ourselves; neither may re-derive every pod's gang. Sources may mutate objects in place, so
        the comparison is against a fingerprint kept here, not against the previous object.
        """
        meta = obj.get("metadata") or {}
        try:
            fingerprint = orjson.dumps(
                [
                    obj.get("spec"),
                    meta.get("uid"),
                    meta.get("labels"),
                    meta.get("annotations"),
                    meta.get("ownerReferences"),
                ],
                option=orjson.OPT_SORT_KEYS,
            )
        except TypeError:
            # nested past what orjson writes (255 levels; a custom resource's preserved fields reach
            # it), or a value JSON has no form for: every write of it is a change, as it was applied
            self._fingerprints.pop((kind, key), None)
            return True
        if self._fingerprints.get((kind, key)) == fingerprint:
            return False
        self._fingerprints[(kind, key)] = sized(fingerprint)
        return True

    def remove(self, obj: dict[str, Any]) -> None:
        kind = kind_of(obj)
        key = key_of(obj)
        if kind == POD:
            rec = self.pods.get(PodKey(key))
            old = rec.obj if rec is not None else None
        else:
            old = self.objects.get(kind, {}).pop(key, None)
        if old is None:
            return
        self.change_gen += 1
        self._object_gen += 1
        if kind == NODE:
            self._remove_node(key)
        elif kind == POD:
            self._remove_pod(PodKey(key))
        elif kind == JOB:
            self._note_succeeded(key, None)
        elif kind in TREE_KINDS:
            self._retree(kind, key, old, None)
        if kind in GROUPING_KINDS:
            self._fingerprints.pop((kind, key), None)
            self.grouping_gen += 1
            self._regroup((kind, key))
        self._notify("DELETED", kind, old)

    def unlisted(self, group: str, kind_name: str, listed: set[str]) -> list[dict[str, Any]]:
        """The objects of one kind whose keys are not in `listed`: what a list applied object by
        object (`upsert`) no longer has, for the source to `remove`."""
        held = self.objects.get((group, kind_name), {})
        return [held[key] for key in held if key not in listed]

    def _notify(self, event: str, kind: Kind, obj: dict[str, Any]) -> None:
        for fn in self._listeners:
            try:
                fn(event, kind, obj)
            except Exception:  # a listener's bug must not corrupt the cache
                log.exception("store listener failed on %s %s", event, key_of(obj))

    # ----------------------------------------------------------------- lookup
    def get(self, group: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        key = f"{namespace}/{name}" if namespace else name
        return self.objects.get((group, kind), {}).get(key)

    def lists(self, group: str, kind: str) -> bool:
        """Whether the store is fed every object of the kind (its source lists and watches it), so that
        one absent from it does not exist or was not seen yet; `listed` None: every kind."""
        return self.listed is None or (group, kind) in self.listed

    def now_lists(self, kind: Kind) -> None:
        """The source lists `kind` from now on (a CRD installed after start-up), its first list applied:
        an object of it absent now is gone or still coming, so the pods that looked for one are
        derived again (a pod grouped below an owner of that kind it could not read, say)."""
        if self.listed is None or kind in self.listed:
            return
        self.listed = self.listed | {kind}
        # grouping reads whether a kind is listed only of a workload owner it cannot find; the pods
        # that read an object of the kind present were derived again as the list applied it
        held = self.objects.get(kind, {})
        refs = (
            [r for r in self._readers if r[0] == kind and r[1] not in held]
            if kind in grouping.WORKLOAD_KINDS
            else []
        )
        if refs:
            self.change_gen += 1
            self._object_gen += 1
            self.grouping_gen += 1
            for ref in refs:
                self._regroup(ref)
        for fn in self._listed_listeners:
            try:
                fn(kind)
            except Exception:  # a listener's bug must not corrupt the cache
                log.exception("store listed-kind listener failed on %s", kind)

    def grouping_version(self, obj: dict[str, Any]) -> bytes | None:
        """The fingerprint of what grouping reads of `obj` (a workload or group object this store
        holds): grouping keeps a workload's tree per fingerprint, so a status update keeps it and
        every pod of the gang shares one. The same bytes object while what it covers is unchanged."""
        kind, key = kind_of(obj), key_of(obj)
        if self.objects.get(kind, {}).get(key) is not obj:
            return None
        return self._fingerprints.get((kind, key))

    def children(self, group: str, kind: str, namespace: str, parent: str) -> list[dict[str, Any]]:
        """The objects of `kind` (a PodGroup or CompositePodGroup) naming `parent` as their parent."""
        bucket = self.objects.get((group, kind), {})
        keys = self._tree.get(children_ref((group, kind), namespace, parent), ())
        return [bucket[k] for k in sorted(keys) if k in bucket]

    def _retree(self, kind: Kind, key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """Keep the parent index of a tree node; the pods that listed the children it joins or leaves
        are derived again (the parent is immutable in the API: this is a node appearing or going)."""
        namespace = key.partition("/")[0]
        before, after = (_parent(old) if old else None), (_parent(new) if new else None)
        if before == after and (old is None) == (new is None):
            return
        for parent, add in ((before, False), (after, True)):
            if parent is None:
                continue
            ref = children_ref(kind, namespace, parent)
            keys = self._tree.setdefault(ref, set())
            if add:
                keys.add(key)
            else:
                keys.discard(key)
                if not keys:
                    del self._tree[ref]
            self._regroup(ref)

    def list(self, group: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        objs = self.objects.get((group, kind), {})
        if namespace is None:
            return list(objs.values())
        prefix = namespace + "/"
        return [o for k, o in objs.items() if k.startswith(prefix)]

    def node(self, name: str) -> dict[str, Any] | None:
        return self.objects.get(NODE, {}).get(name)

    # ----------------------------------------------------------------- nodes
    def vector(self, requests: dict[str, int]) -> np.ndarray:
        """Requests as an int64 row of the arrays' columns; names without a column are left out.

        Use `request_vector` where a name no node offers must fail the fit.
        """
        vec = np.zeros(self.arrays.n_res, dtype=np.int64)
        for name, value in requests.items():
            col = self.resources.find(name)
            if col is not None:
                vec[col] = min(int(value), resources.MAX_UNITS)
        return vec

    def request_vector(self, requests: dict[str, int]) -> tuple[np.ndarray, list[str]]:
        """The vector (the caller's own), and the requested names (amount > 0) that no node has ever
        offered: every plain pod's filter asks."""
        vec, missing = self._kept_vector(requests)
        return vec.copy(), list(missing)

    def _kept_vector(self, requests: dict[str, int]) -> tuple[np.ndarray, tuple[str, ...]]:
        """`vector(requests)`, read-only, and the names no node offers: worked out once per shared
        requests mapping (`_pod_requests` gives pods that ask alike one mapping) while the columns
        stay, for a list charges 150,000 pods and every plain pod's filter asks."""
        columns = len(self.resources)  # a name given a column since makes the vector stale
        hit = self._vectors.get(id(requests))
        if hit is not None and hit[0] is requests and hit[1] == columns:
            return hit[2], hit[3]
        missing = tuple(sorted(n for n, v in requests.items() if v > 0 and self.resources.find(n) is None))
        vec = self.vector(requests)
        vec.flags.writeable = False
        if len(self._vectors) >= _REQUESTS_KEPT:
            self._vectors.clear()
        self._vectors[id(requests)] = (requests, columns, vec, missing)
        return vec, missing

    def _ensure_columns(self, names: Iterable[str]) -> None:
        for name in names:
            if self.resources.find(name) is not None:
                continue
            col = self.resources.column(name)
            self.arrays.add_resource(name, scarce=name not in resources.CORE_RESOURCES)
            # pods bound and holds made before any node offered the name take it now
            for rec in self.pods.values():
                if rec.bound_row >= 0 and rec.requests.get(name):
                    self.arrays.free[rec.bound_row, col] -= min(rec.requests[name], resources.MAX_UNITS)
            for res in self.reservations.values():
                if res.requests.get(name) and self.row_names.get(res.row) == res.node:
                    self.arrays.free[res.row, col] -= min(res.requests[name], resources.MAX_UNITS)

    def _node_allocatable(self, node: dict[str, Any]) -> np.ndarray:
        try:
            alloc = resources.node_allocatable(node)
        except resources.QuantityError as exc:
            log.warning("node %s: %s; treating it as empty", key_of(node), exc)
            alloc = {}
        alloc.pop(podaffinity.ONE_PER_NODE, None)  # the planner's own column; no node offers it
        new = [r for r in alloc if self.resources.find(r) is None]
        room = MAX_RESOURCE_COLUMNS - len(self.resources)
        if len(new) > room:
            # every name is a column of every node's row, and a new one walks every pod: a node
            # offering thousands (a file, a broken device plugin) would grow both for good
            dropped = sorted(new)[max(room, 0) :]
            log.warning(
                "node %s: %d resource names past the %d this service keeps (%s...); taken as not offered",
                key_of(node),
                len(dropped),
                MAX_RESOURCE_COLUMNS,
                ", ".join(dropped[:3]),
            )
            for r in dropped:
                del alloc[r]
        negative = sorted(r for r, v in alloc.items() if v < 0)
        if negative:
            # the API server refuses these; a file may not: the node offers none of them, and stays
            # a node every verb knows (skipped, kube-scheduler's list of it made every call a 400)
            log.warning("node %s: negative allocatable %s; taken as 0", key_of(node), ", ".join(negative))
            for r in negative:
                alloc[r] = 0
        self._ensure_columns(alloc)
        return self.vector(alloc)

    @staticmethod
    def _node_schedulable(node: dict[str, Any]) -> bool:
        if (node.get("spec") or {}).get("unschedulable"):
            return False
        for cond in (node.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "Ready" and cond.get("status") not in ("True", None):
                return False
        return not (node.get("metadata") or {}).get("deletionTimestamp")

    def _apply_node(self, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = key_of(node)
        labels = dict((node.get("metadata") or {}).get("labels") or {})
        labels.setdefault("kubernetes.io/hostname", name)
        alloc = self._node_allocatable(node)
        schedulable = self._node_schedulable(node)
        self.node_gen += 1
        self.release_gen += 1
        row = self.node_rows.get(name)
        if row is None:
            row = self.arrays.add_row(allocatable=alloc, labels=labels, schedulable=schedulable)
            self.node_rows[name] = row
            self.row_names[row] = name
            self._name_index = None
            for key in self._unplaced.pop(name, ()):  # pods seen before their node
                rec = self.pods[key]
                if rec.bound_row < 0:
                    self._charge(rec, row)
            self._rehold(name, row)
        else:
            if _labels(old) != _labels(node) or _taints(old) != _taints(node):
                self.node_terms_gen += 1
            if self.arrays.update_row(row, allocatable=alloc, labels=labels, schedulable=schedulable):
                self.topology_gen += 1
        if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in _taints(node) or ()):
            self.tainted_rows.add(row)
        else:
            self.tainted_rows.discard(row)

    def _remove_node(self, name: str) -> None:
        row = self.node_rows.pop(name, None)
        if row is None:
            return
        self.node_gen += 1
        self.tainted_rows.discard(row)
        self._leaving.pop(row, None)
        self._marked.pop(row, None)
        self.row_names.pop(row, None)
        self._name_index = None
        for rec in self.pods.values():
            if rec.bound_row == row:
                rec.bound_row = -1
                self._unplaced.setdefault(name, set()).add(rec.key)
        # holds on the row stay until the ledger drops them, on no row: the row may be reused, by
        # this very node registered again under its name, whose room they never took (given back on
        # `unhold`, they would add it). Those still held when it registers again take its room then:
        # a binding in flight to the name lands on the new node
        if row in self._reserved_rows:
            del self._reserved_rows[row]
            for key, res in list(self.reservations.items()):
                if res.row == row:
                    self.reservations[key] = dataclasses.replace(res, row=-1)
        self.arrays.remove_row(row)

    def rows_of_names(self, array: bytes) -> np.ndarray | None:
        """The row of each node named in `array` (a NodeNames array's raw bytes), -1 for a name the
        cache does not hold; None when the bytes need decoding first (see `placement.rows_of_names`)."""
        if self._name_index is None:
            self._name_index = index_names(self.row_names)
            self._last_names = (b"", None)
        last, rows = self._last_names
        if array != last:  # kube-scheduler sends one list again while its feasible nodes hold
            rows = rows_of_names(self._name_index, array)
            if rows is not None:
                rows.flags.writeable = False  # handed out again for the same list
            self._last_names = (array, rows)
        return rows

    def eligible_mask(self, pod: dict[str, Any]) -> np.ndarray | None:
        """bool[n_rows]: nodes whose taints, labels and affinity admit `pod`; None when all do.

        For gang members whose own node list kube-scheduler has not sent yet. Cached per placement
        terms until a node changes; only tainted rows are examined unless the pod selects nodes.
        """
        return self._eligible(*nodematch.placement_terms(pod))

    def _eligible(
        self,
        tolerations: list[dict[str, Any]],
        selector: Mapping[str, Any],
        affinity: Mapping[str, Any] | None,
        *,
        sig: bytes | None = None,
    ) -> np.ndarray | None:
        if not selector and not affinity and not self.tainted_rows:
            return None
        if sig is None:
            sig = orjson.dumps([tolerations, selector, affinity], option=orjson.OPT_SORT_KEYS)
        hit = self._eligible_cache.get(sig)
        if hit is not None and hit[0] == self.node_gen:
            return hit[1]
        mask = np.ones(self.arrays.n_rows, dtype=bool)
        rows = self.row_names if (selector or affinity) else {r: self.row_names[r] for r in self.tainted_rows}
        for row, name in rows.items():
            node = self.objects[NODE][name]
            reason = nodematch.node_rejects(
                name=name,
                labels=(node.get("metadata") or {}).get("labels") or {},
                taints=list((node.get("spec") or {}).get("taints") or ()),
                unschedulable=False,  # cordoning is the arrays' `schedulable`
                tolerations=tolerations,
                selector=selector,
                affinity=affinity,
            )
            mask[row] = reason is None
        if len(self._eligible_cache) > 256:
            self._eligible_cache.clear()
        self._eligible_cache[sized(sig)] = (self.node_gen, mask)
        return mask

    # ----------------------------------------------------------------- pods
    def _pod_vector(self, requests: dict[str, int]) -> np.ndarray:
        return self._kept_vector(requests)[0]

    def _charge(self, rec: PodRecord, row: int) -> None:
        self.arrays.sub(row, self._pod_vector(rec.requests))
        rec.bound_row = row
        if not rec.live:
            self._leaving.setdefault(row, set()).add(rec.key)
        elif disrupted_by_gang(rec.obj):
            self._marked.setdefault(row, set()).add(rec.key)

    def _release(self, rec: PodRecord) -> None:
        if rec.bound_row >= 0:
            self.release_gen += 1
            self.arrays.add(rec.bound_row, self._pod_vector(rec.requests))
            for index in (self._leaving, self._marked):
                keys = index.get(rec.bound_row)
                if keys is not None:
                    keys.discard(rec.key)
                    if not keys:
                        del index[rec.bound_row]
            rec.bound_row = -1

    def node_usable(self, node: str | None) -> bool:
        """Whether `node` is in the cache and takes pods now: not cordoned, Ready, not being deleted
        (the arrays' schedulable row)."""
        row = self.node_rows.get(node) if node else None
        return row is not None and bool(self.arrays.schedulable[row])

    def leaving(self) -> list[PodRecord]:
        """Every bound pod being deleted (Terminating), O(those pods)."""
        return [self.pods[k] for keys in self._leaving.values() for k in sorted(keys) if k in self.pods]

    def marked_to_go(self) -> list[PodRecord]:
        """Every live bound pod this service's whole-gang disruption marked to go (`disrupted_by_gang`):
        its eviction is asked again until it goes, so its room is on its way, however long a
        disruption budget refuses it. Read from the pods' own condition, so a restarted process
        knows it too. O(those pods)."""
        return [self.pods[k] for keys in self._marked.values() for k in sorted(keys) if k in self.pods]

    def leaving_on(self, node: str) -> list[PodRecord]:
        """The pods bound to `node` that are being deleted (Terminating, in their grace period): their
        room is on its way back. O(those pods)."""
        row = self.node_rows.get(node)
        keys = self._leaving.get(row, ()) if row is not None else ()
        return [self.pods[k] for k in sorted(keys) if k in self.pods]

    def _pod_requests(self, pod: dict[str, Any]) -> dict[str, int]:
        """resources.pod_requests, once per distinct set of the fields it reads (a Deployment's pods
        ask alike), as one shared mapping that is never edited in place."""
        spec = pod.get("spec")
        try:
            key = orjson.dumps([spec.get(f) for f in _REQUEST_FIELDS]) if isinstance(spec, dict) else None
        except orjson.JSONEncodeError:
            key = None
        found = self._requests_by_spec.get(key) if key is not None else None
        if found is None:
            found = shared(resources.pod_requests(pod))
            if key is not None:
                if len(self._requests_by_spec) >= _REQUESTS_KEPT:
                    self._requests_by_spec.clear()
                self._requests_by_spec[sized(key)] = found
        return found

    def _apply_pod(self, pod: dict[str, Any], key: PodKey, like: PodRecord | None = None) -> None:
        try:
            reqs = self._pod_requests(pod)
        except resources.QuantityError as exc:
            log.warning("pod %s: %s; counting only its pod slot", key, exc)
            reqs = {resources.PODS: 1}
        rec = self.pods.get(key)
        if rec is None:
            rec = self.pods[key] = PodRecord(key=key, obj=pod, requests=reqs)
            rec.keep(pod, like=like)
            self.pods_added += 1
        else:
            self._unplace(rec)
            self._release(rec)
            if rec.uid != str((pod.get("metadata") or {}).get("uid", "")):
                rec.membership = None
            rec.keep(pod, like=like)
            rec.requests = reqs
            rec.membership_fresh = False
        self._index_pod(rec, pod)
        node = rec.node_name
        if node is not None and not rec.terminal:
            row = self.node_rows.get(node)
            if row is not None:
                self._charge(rec, row)
            else:
                self._unplaced.setdefault(node, set()).add(key)

    def _unplace(self, rec: PodRecord) -> None:
        """Forget that `rec` waits for its node (it changed or is gone)."""
        node = rec.node_name
        waiting = self._unplaced.get(node) if node is not None and rec.bound_row < 0 else None
        if waiting is not None:
            waiting.discard(rec.key)
            if not waiting:
                del self._unplaced[node]

    def _remove_pod(self, key: PodKey) -> None:
        rec = self.pods.pop(key, None)
        if rec is not None:
            self._unplace(rec)
            self._release(rec)
        self._unindex_pod(key)
        self._note_reads(key, frozenset())

    # ----------------------------------------------------------------- holds (the ledger's)
    def hold(self, key: PodKey, node: str, requests: dict[str, int]) -> None:
        """Hold capacity on `node` for a pod that is planned or in bind; replaces an earlier hold.

        Only the gang ledger calls this. Names without a column hold nothing until a node offers
        them (then `_ensure_columns` charges them).
        """
        row = self.node_rows[node]
        vec = self._pod_vector(requests)  # computed before anything changes: all or nothing
        self.change_gen += 1
        self.unhold(key)
        self.arrays.sub(row, vec)
        self.reservations[key] = Reservation(node=node, row=row, requests=dict(requests))
        self._reserved_rows[row] = self._reserved_rows.get(row, 0) + 1

    def _rehold(self, name: str, row: int) -> None:
        """A node registered again under `name`: the holds left there when it was removed (bindings
        in flight to it, which land on this node) take its room."""
        for key, res in list(self.reservations.items()) if self.reservations else ():
            if res.row < 0 and res.node == name:
                self.reservations[key] = dataclasses.replace(res, row=row)
                self._reserved_rows[row] = self._reserved_rows.get(row, 0) + 1
                self.arrays.sub(row, self.vector(res.requests))

    def unhold(self, key: PodKey) -> None:
        res = self.reservations.pop(key, None)
        if res is not None:
            if res.row >= 0:
                left = self._reserved_rows.pop(res.row, 0) - 1
                if left > 0:
                    self._reserved_rows[res.row] = left
            self.change_gen += 1
            self.release_gen += 1
            if self.row_names.get(res.row) == res.node:
                self.arrays.add(res.row, self.vector(res.requests))

    def reserved_on(self, row: int) -> bool:
        """Whether a reservation holds room on the row (one of a node since removed holds none)."""
        return row in self._reserved_rows

    # ----------------------------------------------------------------- grouping
    def rank(self, rec: PodRecord) -> int:
        """The priority the pod ranks at in preemption: its 1.37 scheduling.k8s.io PodGroup's where it
        is in one (only a pod naming a PodGroup can be: the rest cost no membership), else its own."""
        pod = rec.obj
        if not (pod.get("spec") or {}).get("schedulingGroup"):
            return pod_priority(pod)
        return member_priority(pod, self.membership(rec).group)

    def membership(self, rec: PodRecord) -> Membership:
        if rec.membership is not None and rec.membership_fresh:
            return rec.membership
        reads = _Reads(self)
        m = grouping.derive_membership(rec.obj, reads)
        self._note_reads(rec.key, frozenset(reads.keys))
        if m.group is not None and m.group.source is Source.SINGLE_POD:
            # a group of one is derived again in microseconds; kept, it would cost every plain pod
            # (most of a cluster) a membership and a group object
            rec.membership = None
            return m
        rec.membership = m
        rec.membership_fresh = True
        return m

    def add_listed_listener(self, fn: Callable[[Kind], None]) -> None:
        """fn(kind) when a kind found after start-up has its first list in (`now_lists`): no object
        event says so, and the pods it regrouped may have left the gang they were planned in."""
        self._listed_listeners.append(fn)

    def add_regroup_listener(self, fn: Callable[[PodKey], None]) -> None:
        """fn(pod) for each pod whose membership may have changed because an object it read did (a
        workload or group object); a pod's own changes come as pod events (`add_listener`)."""
        self._regroup_listeners.append(fn)

    def _note_reads(self, key: PodKey, reads: frozenset[tuple[Kind, str]]) -> None:
        old = self._reads.get(key, frozenset())
        if old == reads:
            return
        for ref in old - reads:
            readers = self._readers.get(ref)
            if readers is not None:
                readers.discard(key)
                if not readers:
                    del self._readers[ref]
        for ref in reads - old:
            self._readers.setdefault(ref, set()).add(key)
        if reads:
            self._reads[key] = reads
        else:
            self._reads.pop(key, None)

    def _regroup(self, ref: tuple[Kind, str]) -> None:
        """An object grouping reads changed: the pods that read it (and only they) are derived again,
        and re-indexed; each pod once, over the workload's one tree."""
        readers = self._readers.get(ref)
        if not readers:
            return
        for key in sorted(readers):
            rec = self.pods.get(key)
            if rec is None:
                continue
            rec.membership_fresh = False
            self._index_pod(rec, rec.obj)
            for fn in self._regroup_listeners:
                try:
                    fn(key)
                except Exception:  # a listener's bug must not corrupt the cache
                    log.exception("store regroup listener failed on %s", key)

    def is_plain(self, pod: dict[str, Any]) -> bool:
        """Surely a group of one (no grouping marks, no readable owner): never a gang, without deriving.

        The last answer is kept for the same mapping while nothing changed: the store indexing a pod
        and the listeners told of it ask about one object in turn."""
        seen = self._plain_seen
        if seen is not None and seen[0] is pod and seen[1] == self.change_gen:
            return seen[2]
        plain = grouping.is_single_pod(pod, self)
        self._plain_seen = (pod, self.change_gen, plain)
        return plain

    def membership_of(self, pod: dict[str, Any]) -> Membership:
        """Membership of a pod as kube-scheduler sent it; the cached one when the store knows the pod."""
        meta = pod.get("metadata") or {}
        rec = self.pods.get(pod_key(str(meta.get("namespace", "")), str(meta.get("name", ""))))
        if rec is not None and rec.uid == str(meta.get("uid", "")):
            return self.membership(rec)
        return grouping.derive_membership(pod, self)

    def group_members(self, group: GroupKey) -> list[PodRecord]:
        """Every non-terminal pod whose membership names `group`, in name order.

        The index is kept by events: a pod is indexed as it arrives or changes, and again when an
        object its membership read changes (`_regroup`); no call derives anything.
        """
        keys: Iterable[PodKey] = self._group_index.get(group, ())
        single = self._single_member(group)
        if single is not None and single not in keys:
            keys = (*keys, single)
        return [self.pods[k] for k in sorted(keys) if k in self.pods]

    def group_size(self, group: GroupKey) -> int:
        """How many non-terminal pods the index holds for `group` (groups of more than one pod), O(1)."""
        return len(self._group_index.get(group, ()))

    def group_live(self, group: GroupKey, *, besides: PodKey | None = None) -> int:
        """How many live pods (`is_live`) the index holds for `group`, O(1); `besides`: one more
        unless it is among them (a pod kube-scheduler sent before this cache had it)."""
        n = self._group_live.get(group, 0)
        if besides is not None and not (
            besides in self._live_indexed and self._pod_group.get(besides) == group
        ):
            n += 1
        return n

    def group_live_by_subgroup(
        self, group: GroupKey, *, besides: tuple[PodKey, str | None] | None = None
    ) -> dict[str | None, int]:
        """`group_live` by subgroup (None: a gang without subgroups), O(subgroups); `besides`: a pod
        and its subgroup, one more there unless it is among them."""
        out = dict(self._leaf_live.get(group, {}))
        if besides is not None:
            pod, leaf = besides
            if not (pod in self._live_indexed and self._pod_group.get(pod) == group):
                out[leaf] = out.get(leaf, 0) + 1
        return out

    def group_gen(self, group: GroupKey) -> int:
        """Changes whenever a member of `group` is indexed or leaves the index (it arrived, changed or
        went): a reader that looked at the group at one value need not walk it again at the same
        one. A stamp of the whole index, never reused (0 once the group has no member)."""
        return self._group_gen.get(group, 0)

    def grouped_pods(self) -> list[PodRecord]:
        """Every pod, terminal or not, that is not surely a group of one (`is_plain`): the pods a scan
        for gangs need look at, without deriving anything for the plain rest of a cluster."""
        return [self.pods[k] for k in self._grouped if k in self.pods]

    def gang_keys(self) -> list[GroupKey]:
        """Every group of more than one pod that has a non-terminal member (groups of one are not
        indexed: see `group_members`)."""
        return [key for key, members in self._group_index.items() if members]

    def may_have_finished(self, group: GroupSpec) -> bool:
        """Whether `finished_counts(group)` can count anything, cheaply (no walk over the members): a
        finished member held, a Job of its namespace counting a finished pod, or its KAI PodGroup's
        own count. A reader on a hot path asks this first."""
        if self._finished_index.get(group.key) or group.namespace in self._succeeded_jobs:
            return True
        if group.source is Source.KAI_PODGROUP and not group.subgroups:
            pg = self.get("scheduling.run.ai", "PodGroup", group.namespace, group.name)
            return pg is not None and _succeeded_of(pg) > 0
        return False

    def finished_counts(self, group: GroupSpec) -> dict[str | None, int]:
        """Members per leaf that ran to completion (Succeeded). A gang's quorum counts them as it counts
        bound ones (so does KAI's): a Job whose other pods finished is not short of its retried one.
        Counted from the pods the store holds, or, once the pod garbage collector deleted them, from
        what their Jobs keep (`status.succeeded`), whichever is more. Kept until an object changes (a
        hold changes none of it): a filter call asks for its gang's before and after it plans."""
        hit = self._finished_seen.get(group.key)
        if hit is not None and hit[0] == self._object_gen and hit[1] == group:
            return dict(hit[2])
        by_pods: dict[str | None, int] = {}
        finished = [self.pods[k] for k in self._finished_index.get(group.key, ()) if k in self.pods]
        for rec in finished:
            leaf = self.membership(rec).subgroup
            by_pods[leaf] = by_pods.get(leaf, 0) + 1
        by_jobs = self._succeeded_by_jobs(
            group.namespace,
            [*(self.pods[k] for k in self._group_index.get(group.key, ()) if k in self.pods), *finished],
        )
        if group.source is Source.KAI_PODGROUP and not group.subgroups:
            # an external PodGroup's own count (KAI's scheduler keeps it), for pods no Job owns
            pg = self.get("scheduling.run.ai", "PodGroup", group.namespace, group.name) or {}
            n = _succeeded_of(pg)
            if n > by_jobs.get(None, 0):
                by_jobs[None] = n
        counts = {
            leaf: max(by_pods.get(leaf, 0), by_jobs.get(leaf, 0)) for leaf in by_pods.keys() | by_jobs.keys()
        }
        if len(self._finished_seen) >= _REQUESTS_KEPT:
            self._finished_seen.clear()
        self._finished_seen[group.key] = (self._object_gen, group, counts)
        return dict(counts)

    def _spec_facts(self, rec: PodRecord) -> _SpecFacts | None:
        """What the decisions read of the pod's spec alone (its node name aside), worked out once per
        spec its workload's pods share: a large gang's plan and release ask it of every member. None
        for a pod kept as it came."""
        spec = rec.spec_template()
        if spec is None:
            return None
        hit = self._facts_by_spec.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        pod = {"spec": spec}
        try:
            terms = nodematch.placement_terms(pod)
            sig = orjson.dumps(list(terms), option=orjson.OPT_SORT_KEYS)
            facts: _SpecFacts | None = _SpecFacts(
                cycle=cycle_needed(pod), terms=terms, sig=sized(sig), anti=_may_repel(spec)
            )
        except (TypeError, AttributeError):
            facts = None  # an odd shape: read from the pod, as it always was, and reported there
        if len(self._facts_by_spec) >= _REQUESTS_KEPT:
            self._facts_by_spec.clear()
        self._facts_by_spec[id(spec)] = (spec, facts)
        return facts

    def cycle_needed(self, rec: PodRecord) -> str:
        """`model.cycle.cycle_needed` of the pod, read once per spec its workload's pods share."""
        facts = self._spec_facts(rec)
        return facts.cycle if facts is not None else cycle_needed(rec.obj)

    def carries_label(self, key: str) -> bool:
        """Whether any node has the label `key` (topology.resolve asks before a key becomes a level)."""
        return self.arrays.carries(key)

    def eligible_mask_of(self, rec: PodRecord) -> np.ndarray | None:
        """`eligible_mask` of the pod (the same mask object), its terms read once per shared spec."""
        facts = self._spec_facts(rec)
        if facts is None:
            return self.eligible_mask(rec.obj)
        return self._eligible(*facts.terms, sig=facts.sig)

    def one_per_node_of(self, rec: PodRecord) -> bool:
        """`podaffinity.one_per_node` of the pod; a spec its workload's pods share with no required pod
        anti-affinity answers without building the pod."""
        facts = self._spec_facts(rec)
        if facts is not None and not facts.anti:
            return False
        return podaffinity.one_per_node(rec.obj)

    def _note_succeeded(self, key: str, job: dict[str, Any] | None) -> None:
        ns, slash, _ = key.partition("/")
        namespace = ns if slash else ""
        if job is not None and _succeeded_of(job):
            self._succeeded_jobs.setdefault(namespace, set()).add(key)
            return
        keys = self._succeeded_jobs.get(namespace)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._succeeded_jobs[namespace]

    def _succeeded_by_jobs(self, namespace: str, members: Iterable[PodRecord]) -> dict[str | None, int]:
        """`status.succeeded` of the Jobs that own `members`, per leaf (a Job whose members sit in
        several leaves cannot say which of them its finished pods were in: it is left out)."""
        if namespace not in self._succeeded_jobs:
            return {}  # no Job there counts a finished pod: nothing to walk the members for
        leaf_of: dict[tuple[str, str], str | None] = {}
        split: set[tuple[str, str]] = set()
        for rec in members:
            ref = controller_ref(rec.obj)
            if ref is None or (api_group(str(ref.get("apiVersion", ""))), ref.get("kind")) != JOB:
                continue
            job = (str(ref.get("name", "")), str(ref.get("uid", "")))
            leaf = self.membership(rec).subgroup
            if leaf_of.setdefault(job, leaf) != leaf:
                split.add(job)
        out: dict[str | None, int] = {}
        for (name, uid), leaf in leaf_of.items():
            obj = self.get(*JOB, namespace, name)
            if (name, uid) in split or obj is None or (uid and (obj.get("metadata") or {}).get("uid") != uid):
                continue
            n = _succeeded_of(obj)
            if n:
                out[leaf] = out.get(leaf, 0) + n
        return out

    def _single_member(self, group: GroupKey) -> PodKey | None:
        """The pod whose group of one is `group`: groups of one are not indexed (a set per plain pod)."""
        pod = single_pod_of(group)
        if pod is None:
            return None  # a gang's key
        ns, _, name = pod.partition("/")
        for key in (pod, name) if ns == "default" else (pod,):
            rec = self.pods.get(PodKey(key))
            if rec is None or rec.terminal:
                continue
            m = self.membership(rec)
            if m.state is MembershipState.MEMBER and m.group is not None and m.group.key == group:
                if m.group.source is Source.SINGLE_POD:
                    return rec.key
        return None

    def _index_pod(self, rec: PodRecord, pod: dict[str, Any]) -> None:
        """Index `rec` by its group; `pod` is its mapping (rec.obj, or the one it was kept from)."""
        self._unindex_pod(rec.key)
        reads = _Reads(self)
        plain = grouping.is_single_pod(pod, reads)
        self._plain_seen = (pod, self.change_gen, plain)  # the listeners told of it ask next
        if not plain:
            self._grouped.add(rec.key)
        if plain or (rec.terminal and not rec.succeeded):
            # an owner missing now may arrive: the pod is indexed again then (`_regroup`)
            self._note_reads(rec.key, frozenset(reads.keys))
            return
        m = self.membership(rec)
        if rec.terminal:  # Succeeded: it counts toward its gang's quorum (finished_counts)
            if m.state is MembershipState.MEMBER and m.group is not None:
                if m.group.source is not Source.SINGLE_POD:
                    self._finished_index.setdefault(m.group.key, set()).add(rec.key)
                    self._pod_finished[rec.key] = m.group.key
            return
        group = m.group if m.state is MembershipState.MEMBER else None
        if group is not None and group.source is not Source.SINGLE_POD:  # groups of one: _single_member
            self._group_index.setdefault(group.key, set()).add(rec.key)
            self._pod_group[rec.key] = group.key
            self._index_stamp += 1
            self._group_gen[group.key] = self._index_stamp
            if rec.live:
                self._live_indexed[rec.key] = m.subgroup
                self._group_live[group.key] = self._group_live.get(group.key, 0) + 1
                leaves = self._leaf_live.setdefault(group.key, {})
                leaves[m.subgroup] = leaves.get(m.subgroup, 0) + 1

    def _unindex_pod(self, key: PodKey) -> None:
        self._grouped.discard(key)
        group = self._pod_group.get(key)
        if group is not None:
            self._index_stamp += 1
            self._group_gen[group] = self._index_stamp
            if key in self._live_indexed:
                leaf = self._live_indexed.pop(key)
                left = self._group_live.pop(group, 0) - 1
                if left > 0:
                    self._group_live[group] = left
                leaves = self._leaf_live.get(group, {})
                left = leaves.pop(leaf, 0) - 1
                if left > 0:
                    leaves[leaf] = left
                elif not leaves:
                    self._leaf_live.pop(group, None)
        for pod_group, index in (
            (self._pod_group, self._group_index),
            (self._pod_finished, self._finished_index),
        ):
            group = pod_group.pop(key, None)
            if group is not None:
                members = index.get(group)
                if members is not None:
                    members.discard(key)
                    if not members:
                        del index[group]
                        if index is self._group_index:
                            self._group_gen.pop(group, None)  # a stamp is never reused: 0 differs
