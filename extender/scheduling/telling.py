"""What pods and group objects are told of their gang, and when: the PodScheduled conditions of
pending members, the group object's status, the gang's story as events (on the pod that took the step,
the group object and the workload), and the nudges that bring members parked in kube-scheduler's
queues back when what they waited for arrives.

Owns ReasonsTold (what each pod, gang and group object was last told, so a reason that stands still
costs no write) and the mark of quorum_arrived's last look.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from extender.grouping.owners import walk_owners
from extender.model.group import GroupSpec, MembershipState, Source
from extender.model.keys import GroupKey, PodKey, single_pod_of
from extender.scheduling.decisions import Effect, pod_ref
from extender.scheduling.reasons import ReasonsTold
from extender.scheduling.status import group_status
from extender.scheduling.view import View, marked_unschedulable
from extender.state.store import is_live, kind_of

CACHE_WAIT_S = 300.0
"""How long a pod whose bind was refused for want of it in the cache is waited for (quorum_arrived)."""

# The workloads whose gang's story is also told on them (the pods' top owner), by (API group, kind).
WORKLOAD_KINDS = frozenset({("batch", "Job"), ("jobset.x-k8s.io", "JobSet"), ("kubeflow.org", "PyTorchJob")})
# Where a gang's group object lives, by where its definition comes from; a derived gang's is the
# KAI PodGroup a podgrouper created under the gang's name, when there is one.
_GROUP_OBJECTS: dict[Source, tuple[tuple[str, str], ...]] = {
    Source.KAI_PODGROUP: (("scheduling.run.ai", "PodGroup"),),
    Source.K8S_PODGROUP: (("scheduling.k8s.io", "PodGroup"),),
    Source.K8S_COMPOSITE: (("scheduling.k8s.io", "CompositePodGroup"),),
    Source.KAI_DERIVED: (("scheduling.run.ai", "PodGroup"),),
    Source.JOBSET_SCHEDULING: (("scheduling.k8s.io", "PodGroup"), ("scheduling.run.ai", "PodGroup")),
}


def gang_message(gang: GroupKey, reason: str) -> str:
    """A gang's reason as a pod or its group object shows it: naming the gang."""
    return reason if reason.startswith(f"gang {gang}") else f"gang {gang}: {reason}"


class Telling:
    def __init__(self, view: View) -> None:
        self.view = view
        self.store = view.store
        self.ledger = view.ledger
        self.told = ReasonsTold()
        self._arrivals_seen = (-1, -1)  # (pods_added, grouping_gen) at the last quorum_arrived look
        self._short_looked: dict[GroupKey, tuple[int, int]] = {}
        """gang short of pods -> (its members' index stamp, grouping_gen) when quorum_arrived last
        walked it: a pod of another gang (most of a busy cluster's) walks none of it again."""
        self._regroups_seen = -1  # grouping_gen at the last look for regrouped gangs that did not fit

    def tell_gang(self, gang: GroupKey, *, skip: Sequence[PodKey] = ()) -> list[Effect]:
        """The gang's current reason, written where it is not said yet: the PodScheduled condition of
        each pending member whose condition says something else (kube-scheduler writes the one it
        filters, `skip`), and the group object's status. Nothing when the reason stands still."""
        entry = self.ledger.entry(gang)
        if entry is None or not entry.last_reason:
            return []
        reason = gang_message(gang, entry.last_reason)
        if self.told.gangs.get(gang) == reason or self.told.hold_back(gang, reason, self.ledger.clock()):
            return []
        self.told.gangs[gang] = reason
        members = self.store.group_members(gang)
        spec = self.view.spec_of(gang, members)
        if spec is not None and self.ledger.quorum_bound(spec, self.ledger.bound_counts(spec)):
            return []  # bound: its status says so; members beyond quorum are placed one by one
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason}
        effects = []
        for rec in members:
            pk = rec.key
            at_bind = pk in entry.arrived or pk in entry.releasing
            if pk in skip or at_bind or rec.node_name or not rec.live:
                continue  # told by kube-scheduler (filtered now, or its bind call answered), or bound
            if self.told.stale(pk, reason):
                self.told.told(pk, reason)
                effects.append(Effect("condition", *pod_ref(pk), dict(condition)))
        if spec is not None:
            effects += self.tell_group(spec, "Pending", reason)
        return effects

    def tell_group(self, spec: GroupSpec, phase: str, reason: str) -> list[Effect]:
        if not self.told.group_changed(spec.key, phase, reason):
            return []
        status = group_status(self.store, spec, phase, reason)
        return [status] if status is not None else []

    def fresh_reasons(self) -> list[Effect]:
        """Tell the gangs whose reason changed outside a verb (a member or node gone, a plan dropped
        by the watch) or was held back (a count of pods): the ticker's pass. Costs a comparison per
        gang when nothing changed."""
        effects = []
        for gang, entry in self.ledger.entries():
            if entry.last_reason and self.told.gangs.get(gang) != gang_message(gang, entry.last_reason):
                effects += self.tell_gang(gang)
        known = {*self.told.gangs, *self.told.counts, *self.told.groups}
        for gang in [g for g in known if self.ledger.entry(g) is None]:
            self.told.forget_gang(gang)  # forgotten by the ledger: its members are gone
        return effects

    def story(
        self, spec: GroupSpec, pod: PodKey | None, reason: str, message: str, event_type: str = "Normal"
    ) -> list[Effect]:
        """One event for a gang's step on the pod that took it (when given), on its group object and
        on its workload (the members' top owner): one per object, never one per member."""
        data: dict[str, Any] = {"reason": reason, "message": message}
        if event_type != "Normal":
            data["type"] = event_type
        effects = [Effect("event", *pod_ref(pod), dict(data))] if pod else []
        for obj in self._story_objects(spec, pod):
            meta = obj.get("metadata") or {}
            target = {
                "kind": str(obj.get("kind", "")),
                "apiVersion": str(obj.get("apiVersion", "")),
                "uid": str(meta.get("uid") or ""),
            }
            ns = str(meta.get("namespace") or spec.namespace)
            effects.append(Effect("event", ns, str(meta.get("name", "")), {**data, **target}))
        return effects

    def gang_events(
        self, spec: GroupSpec, pod: PodKey | None, reason: str, message: str, event_type: str = "Normal"
    ) -> list[Effect]:
        """The gang's story for a step taken outside the verbs (a whole-gang eviction): see `story`."""
        return self.story(spec, pod, reason, message, event_type)

    def _story_objects(self, spec: GroupSpec, pod: PodKey | None) -> list[dict[str, Any]]:
        out = []
        for group, kind in _GROUP_OBJECTS.get(spec.source, ()):
            obj = self.store.get(group, kind, spec.namespace, spec.name)
            if obj is not None:
                out.append(obj)
                break
        rec = self.store.pods.get(pod) if pod else None
        if rec is None:
            members = self.store.group_members(spec.key)
            rec = members[0] if members else None
        if rec is not None:
            pod_obj = rec.obj  # built anew on each read for a pod with no kept membership
            top = walk_owners(pod_obj, self.store).top
            if top is not pod_obj and kind_of(top) in WORKLOAD_KINDS:
                out.append(top)
        return out

    def quorum_arrived(self) -> list[Effect]:
        """Nudge the members turned away for want of pods once their gang's quorum exists, and pods
        turned away for want of their group object once it is cached.

        kube-scheduler does not retry a pod because another pod appeared (1.20 leaves it parked for up
        to a minute), and the member that completes the quorum may be one kube-scheduler cannot place
        itself, so no filter call would ever plan the gang. Checked only when a pod or a grouping
        object appeared since the last look."""
        mark = (self.store.pods_added, self.store.grouping_gen)
        ledger = self.ledger
        effects: list[Effect] = self._regrouped_unfit()
        if mark == self._arrivals_seen or not ledger.awaiting_arrivals():
            return effects
        self._arrivals_seen = mark
        now = ledger.clock()
        for pk, since in ledger.short_of_cache_since():
            rec = self.store.pods.get(pk)
            if rec is None:
                if now - since > CACHE_WAIT_S:
                    ledger.cache_arrived(pk)  # deleted before this process saw it: bounded memory
                continue
            ledger.cache_arrived(pk)
            if not rec.node_name and is_live(rec.obj):
                effects.append(Effect("nudge", *pod_ref(pk), {"value": "cached"}))
        for pk in self.ledger.short_of_group_pods():
            rec = self.store.pods.get(pk)
            if rec is None:
                continue  # not in the cache yet either; its deletion clears it
            if rec.node_name or not is_live(rec.obj):
                self.ledger.group_arrived(pk)  # placed or finished: nothing to bring back
            elif self.store.membership(rec).state is not MembershipState.GROUP_MISSING:
                self.ledger.group_arrived(pk)
                effects.append(Effect("nudge", *pod_ref(pk), {"value": "group-arrived"}))
        looked, self._short_looked = self._short_looked, {}
        for key, held in self.ledger.short_of_pods_gangs():
            seen = (self.store.group_gen(key), self.store.grouping_gen)
            self._short_looked[key] = seen
            if looked.get(key) == seen:
                continue  # none of its members came, changed or went, nor its definition: still short
            # judged by the gang's definition now: a quorum lowered in place (an edited minMember, a
            # Job seen after its pods) may be met by the members already there, with no pod to come
            spec = self.view.spec_of(key, self.store.group_members(key)) or held
            counts = self.view.live_leaf_counts(key, spec)
            if counts and spec.ready_leaves(counts) is None:
                continue  # still short: keep watching
            self.ledger.pods_arrived(key)  # ready, or every member gone: nothing left to wait for
            if counts:
                effects += self.nudge_turned_away(key, "quorum")
        return effects

    def _regrouped_unfit(self) -> list[Effect]:
        """Nudge the turned-away members of a gang that fit nowhere once its definition changed (an
        elastic minCount lowered in place, a constraint edited): kube-scheduler parked them as
        unschedulable, and no event of its own retries them. Looked at when grouping objects changed."""
        if self.store.grouping_gen == self._regroups_seen:
            return []
        self._regroups_seen = self.store.grouping_gen
        effects: list[Effect] = []
        for key, spec in self.ledger.unfit_gangs():
            now_spec = self.view.spec_of(key, self.store.group_members(key))
            if now_spec is not None and now_spec != spec:
                self.ledger.forget_no_fit(key)
                effects += self.nudge_turned_away(key, "regrouped")
        return effects

    def note_bind_error(self, key: PodKey, error: str) -> None:
        """A bind call answered with an error: kube-scheduler writes it on the pod."""
        rec = self.store.pods.get(key)
        if rec is not None and self.view.gang_of_pod(rec.obj) is not None:
            self.told.told(key, error)

    def backoffs_over(self) -> list[Effect]:
        """Nudge the members of gangs whose backoff ended that the filter turned away meanwhile."""
        return [e for gang in self.ledger.backoffs_over() for e in self.nudge_turned_away(gang, "retry")]

    def startup_nudges(self) -> list[Effect]:
        """Once the cache is synced after a start: nudge the parked members of every gang whose quorum
        exists. A restarted service has answered none of them; kube-scheduler would retry them only
        at its next flush (up to a minute on 1.20, five on 1.36), and no filter call plans the gang
        until one of them comes back."""
        parked: dict[GroupKey, list[PodKey]] = {}
        specs: dict[GroupKey, GroupSpec] = {}
        for rec in self.store.pods.values():
            if rec.node_name or not rec.live or not marked_unschedulable(rec.obj):
                continue
            m = self.store.membership(rec)
            if (
                m.state is not MembershipState.MEMBER
                or m.group is None
                or m.group.source.value == "single-pod"
            ):
                continue
            parked.setdefault(m.group.key, []).append(rec.key)
            specs[m.group.key] = m.group
        effects = []
        for key, pods in parked.items():
            if specs[key].ready_leaves(self.view.live_leaf_counts(key, specs[key])) is None:
                self.ledger.await_pods(specs[key])  # nudged by quorum_arrived once the rest exist
                for pk in pods:
                    self.ledger.note_answer(pk, turned_away=True)
                continue
            effects += self.nudge_turned_away(key, "restart")  # the parked ones: PodScheduled=False
        return effects

    def nudge_turned_away(
        self, gang: GroupKey, why: str, *, skip: Sequence[PodKey] = (), only: Sequence[PodKey] | None = None
    ) -> list[Effect]:
        """A nudge for each unbound member the service turned away (it sits in kube-scheduler's
        backoff or unschedulable queue); members still in its active queue need no API write.
        `only`: these members alone (where they were turned away)."""
        members = self.store.group_members(gang)
        if only is not None:
            members = [rec for pk in only if (rec := self.store.pods.get(pk)) is not None]
        return [
            Effect("nudge", *pod_ref(rec.key), {"value": f"{single_pod_of(gang) or gang}:{why}"})
            for rec in members
            if self.view.turned_away(rec.key)
            and not rec.node_name
            and is_live(rec.obj)
            and rec.key not in skip
        ]
