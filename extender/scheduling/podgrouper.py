"""The podgrouper: the KAI PodGroups this service keeps for the gangs it derives from workloads.

KAI's podgrouper creates one `scheduling.run.ai/v2alpha2` PodGroup per top-level Job, JobSet and
PyTorchJob. Where it does not run, this does the same, so a derived gang shows in
`kubectl get podgroups` with the spec `gang-extender podgroups -f` prints (one renderer,
`kai.podgroup_object`), owned by its workload so the garbage collector deletes it with it.

The PodGroup is a view: pods keep deriving their gang from their owner (the gang key and the
PodGroup's name are the same `pg-<name>-<uid>`), so creating, changing or losing it never moves
a pod to another gang.

Ours carry `app.kubernetes.io/managed-by: gang-extender`. A PodGroup without it (KAI's own
podgrouper's, a user's) is never created over, updated or deleted; a workload marked
`kai.scheduler/skip-podgrouper: "true"` gets none, and loses ours. A workload that is gone is the
garbage collector's business, not ours.

Work is proportional to change: a store listener marks the workloads whose object, or whose
PodGroup, changed, and each `plan()` looks only at those (every workload once, after the first sync).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from collections.abc import Callable
from typing import Any

from extender.grouping import GroupingError, groups_for_workload, kai
from extender.grouping.owners import controller_ref, kind_of, meta, walk_owners
from extender.model import labels as keys
from extender.model.group import Source
from extender.model.keys import GroupKey, object_key
from extender.scheduling.decisions import Effect
from extender.state.store import ClusterStore, Kind

log = logging.getLogger(__name__)

WORKLOAD_KINDS: frozenset[Kind] = frozenset({kai.JOB, kai.JOBSET, kai.PYTORCHJOB})
# the spec fields a derived PodGroup's renderer writes; any other (a webhook's default, say) is left be
MANAGED_SPEC_FIELDS = (
    "minMember",
    "minSubGroup",
    "queue",
    "priorityClassName",
    "topologyConstraint",
    "subGroups",
)
RETRY_S = 5.0
"""Delay before a workload whose PodGroup write failed is looked at again; doubles per failure (a
refused write, say a grant missing from the role, does not heal by itself), up to RETRY_MAX_S."""
RETRY_MAX_S = 300.0
MAX_PER_PLAN = 500
"""Workloads looked at per plan (~70 us each): after a start with 10k workloads the first pass is
spread over ticks, never holding up filter and bind answers for long."""
_TOLD_MAX = 10_000

WorkloadRef = tuple[Kind, str]  # ((API group, kind), "ns/name")


class Action(enum.Enum):
    KEEP = "keep"  # ours matches, or there is nothing to keep
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"  # the workload no longer yields a derived gang
    FOREIGN = "foreign"  # a PodGroup of that name that is not ours: left alone
    INVALID = "invalid"  # the workload's grouping fields are invalid: ours is left as it is
    GONE = "gone"  # the workload is gone: the garbage collector deletes ours


@dataclasses.dataclass(frozen=True)
class Step:
    action: Action
    effect: Effect | None = None
    message: str = ""


def is_top_level(workload: dict[str, Any], lookup: Any) -> bool:
    """Whether the workload is the top of its pods' owner chain, as membership walks it: a JobSet's
    child Job is not, even while its JobSet is briefly out of the cache."""
    ref = controller_ref(workload)
    if ref is None:
        return True
    if (kai.api_group_of(ref), str(ref.get("kind", ""))) in WORKLOAD_KINDS:
        return False
    return not walk_owners(workload, lookup).owners


def desired_podgroup(workload: dict[str, Any], lookup: Any) -> dict[str, Any] | None:
    """The PodGroup this service keeps for `workload`, or None when the workload yields no derived
    gang (not a top-level Job/JobSet/PyTorchJob, skip-podgrouper, a JobSet with spec.scheduling,
    whose groups are scheduling.k8s.io objects its controller owns). Raises GroupingError."""
    if kind_of(workload) not in WORKLOAD_KINDS or not is_top_level(workload, lookup):
        return None
    derived = [g for g in groups_for_workload(workload, lookup) if g.source is Source.KAI_DERIVED]
    if not derived:
        return None
    obj = kai.podgroup_object(derived[0], top=workload)
    obj["metadata"]["labels"] = {keys.MANAGED_BY: keys.MANAGER}
    return obj


def spec_patch(current: Any, desired: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that brings `current`'s managed fields to `desired` (None removes a field),
    or None when they already agree."""
    current = current if isinstance(current, dict) else {}
    patch = {f: desired.get(f) for f in MANAGED_SPEC_FIELDS if current.get(f) != desired.get(f)}
    return patch or None


def _owned_by(pg: dict[str, Any], workload: dict[str, Any]) -> bool:
    uid = meta(workload).get("uid")
    return any(
        isinstance(r, dict) and r.get("uid") == uid and r.get("controller")
        for r in meta(pg).get("ownerReferences") or []
    )


def step_for(ref: WorkloadRef, store: ClusterStore) -> Step:
    """What to do about one workload's PodGroup, from the store alone."""
    kind, key = ref
    ns, _, name = key.partition("/")
    workload = store.get(*kind, ns, name)
    if workload is None:
        return Step(Action.GONE)
    what = f"{kind[1]} {key}"
    try:
        desired = desired_podgroup(workload, store)
    except GroupingError as err:
        return Step(Action.INVALID, message=f"{what} is invalid ({err}): its PodGroup is left as it is")
    pg_name = kai.derived_name(workload)
    current = store.get(*kai.KAI_PODGROUP, ns, pg_name)
    data: dict[str, Any] = {"group": kai.KAI_PODGROUP[0], "kind": kai.KAI_PODGROUP[1], "workload": ref}
    if current is not None and not kai.is_managed(current):
        return Step(
            Action.FOREIGN,
            message=f"PodGroup {ns}/{pg_name} (for {what}) was not created by gang-extender (no "
            f"{keys.MANAGED_BY}={keys.MANAGER} label): leaving it alone",
        )
    if desired is None:
        if current is not None and _owned_by(current, workload):
            uid = str(meta(current).get("uid", ""))
            return Step(Action.DELETE, Effect("podgroup-delete", ns, pg_name, {**data, "uid": uid}))
        return Step(Action.KEEP)
    if current is None:
        return Step(Action.CREATE, Effect("podgroup-create", ns, pg_name, {**data, "object": desired}))
    patch = spec_patch(current.get("spec"), desired["spec"])
    if patch is None:
        return Step(Action.KEEP)
    return Step(Action.UPDATE, Effect("podgroup-patch", ns, pg_name, {**data, "patch": {"spec": patch}}))


class Podgrouper:
    """Which workloads to look at next; `plan()` turns them into PodGroup writes."""

    def __init__(self, store: ClusterStore, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._dirty: set[WorkloadRef] = set()
        self._everything = True  # the first plan looks at every workload
        self._retry_at: dict[WorkloadRef, float] = {}
        self._failures: dict[WorkloadRef, int] = {}
        self._told: set[str] = set()
        self._arrived: set[GroupKey] = set()
        self._gen_seen = store.grouping_gen
        store.add_listener(self._on_change)
        store.add_listed_listener(self._on_listed)

    def _on_listed(self, kind: Kind) -> None:
        """KAI's PodGroup kind served after start-up (its CRD installed second): every workload's
        PodGroup is written now, not at the end of the backoff its refused creates ran up meanwhile."""
        if kind == kai.KAI_PODGROUP:
            self._failures.clear()
            self._retry_at.clear()
            self.look_at_everything()

    def _on_change(self, event: str, kind: Kind, obj: dict[str, Any]) -> None:
        gen_before, self._gen_seen = self._gen_seen, self._store.grouping_gen
        if kind in WORKLOAD_KINDS:
            # the store bumps grouping_gen when what grouping reads of a workload changed (spec,
            # labels, annotations, owners); a status write (a Job's, on every pod transition) does not
            if event != "MODIFIED" or self._store.grouping_gen != gen_before:
                self._dirty.add((kind, object_key(obj)))
        elif kind == kai.KAI_PODGROUP:
            # a PodGroup edited, deleted by hand, or someone else's appearing: its workload is looked
            # at again. Ours appearing is our own create landing (or the first list, which the first
            # plan covers): nothing to look at
            ref = controller_ref(obj)
            if event == "ADDED" and kai.is_managed(obj):
                if not self._everything:  # not the first list: the gang may have moved on already
                    self._arrived.add(GroupKey(object_key(obj)))
                return
            if ref is None:
                return
            owner_kind = (kai.api_group_of(ref), str(ref.get("kind", "")))
            if owner_kind in WORKLOAD_KINDS:
                ns = meta(obj).get("namespace") or "default"
                self._dirty.add((owner_kind, f"{ns}/{ref.get('name', '')}"))

    def plan(self) -> list[Effect]:
        """The writes that bring the PodGroups of the changed workloads to what they should be."""
        if self._everything:
            self._everything = False
            for kind in WORKLOAD_KINDS:
                self._dirty.update((kind, key) for key in self._store.objects.get(kind, {}))
        if self._retry_at:
            now = self._clock()
            for ref in [r for r, at in self._retry_at.items() if at <= now]:
                del self._retry_at[ref]
                self._dirty.add(ref)
        if not self._dirty:
            return []
        batch = sorted(self._dirty)[:MAX_PER_PLAN]
        self._dirty.difference_update(batch)
        effects: list[Effect] = []
        for ref in batch:
            try:
                step = step_for(ref, self._store)
            except Exception:  # one workload's bug must not cost the rest of the batch their writes
                log.exception(
                    "podgrouper: %s %s could not be planned; its PodGroup is left as it is", ref[0][1], ref[1]
                )
                continue
            if step.effect is not None:
                effects.append(step.effect)
            elif step.message:
                self._tell(step.message)
        return effects

    def look_at_everything(self) -> None:
        """Plan every workload again at the next pass, as after a start: a replica that just became the
        leader writes what the cluster lacks, whatever it decided, or dropped, before."""
        self._everything = True

    def take_arrived(self) -> list[GroupKey]:
        """Gangs whose PodGroup of ours appeared since the last call. Their gang may have been planned
        or bound before it did (a gang binds in well under a second), so its status is owed."""
        arrived, self._arrived = sorted(self._arrived), set()
        return arrived

    def write_done(self, effect: Effect, *, ok: bool) -> None:
        """A write of `effect` finished; one that did not land is looked at again after a backoff."""
        ref = effect.data.get("workload")
        if ref is not None and ok:
            self._failures.pop(ref, None)
        elif ref is not None:
            failures = self._failures[ref] = self._failures.get(ref, 0) + 1
            self._retry_at[ref] = self._clock() + min(RETRY_S * 2 ** (failures - 1), RETRY_MAX_S)

    def _tell(self, message: str) -> None:
        """Log a reason once: a foreign or invalid object is looked at on every change of its workload."""
        if message in self._told:
            return
        if len(self._told) >= _TOLD_MAX:
            self._told.clear()
        self._told.add(message)
        log.info("%s", message)
