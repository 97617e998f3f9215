"""What /debug shows: a gang as the ledger, the store and its queue see it (describe, describe_all),
and every queue's spec, usage, fair share and holds (describe_queues). Reads only; owns no state.
"""

from __future__ import annotations

from typing import Any

from extender.gang.entry import Phase
from extender.model.keys import GroupKey, single_pod_key, single_pod_of
from extender.model.priority import member_priority
from extender.scheduling import planning, queues
from extender.scheduling.admission import Admission
from extender.scheduling.holding import Holding
from extender.scheduling.pooling import PoolMap
from extender.scheduling.topology import TopologyError
from extender.scheduling.view import View


class Debug:
    def __init__(self, view: View, admission: Admission, holding: Holding, pools: PoolMap) -> None:
        self.view = view
        self.pools = pools
        self.store = view.store
        self.ledger = view.ledger
        self.admission = admission
        self.holding = holding

    def describe_queues(self) -> dict[str, Any]:
        """Every queue's spec, usage, fair share and the gangs it holds, for /debug/queues."""
        snap = self.admission.queue_snapshot()
        if snap is None:
            return {"enforced": False, "defaultQueue": self.admission.default_queue, "queues": []}
        return {
            "enforced": True,
            "defaultQueue": self.admission.default_queue,
            "queues": queues.describe(snap, self.admission.queue_holds),
            "unknownQueues": dict(sorted(snap.unknown.items())),
        }

    def describe(self, gang: GroupKey) -> dict[str, Any] | None:
        entry = self.ledger.entry(gang)
        members = self.store.group_members(gang)
        if entry is None and not members:
            ns, _, name = gang.partition("/")
            alone = single_pod_key(ns, name)  # `explain NS/NAME` of a pod in no gang: its group of one
            if single_pod_of(gang) is None and (self.ledger.entry(alone) or self.store.group_members(alone)):
                return self.describe(alone)
            return None
        spec = self.view.spec_of(gang, members)
        plan = entry.plan if entry else {}
        phase = self.ledger.phase(gang, spec).value
        return {
            "gang": gang,
            "phase": phase,
            "quorum": spec.quorum_upper_bound() if spec else None,
            "policy": spec.policy.value if spec else None,
            "members": [
                {
                    "pod": r.key,
                    "subgroup": self.store.membership(r).subgroup,
                    "node": r.node_name or self.ledger.assumed_node(r.key),
                    "planned": plan[r.key].node if r.key in plan else None,
                    "waitingAtBind": bool(entry and r.key in entry.arrived),
                }
                for r in members
            ],
            "plan": {pk: p.node for pk, p in plan.items()},
            "domain": entry.domain if entry else "",
            "reservation": {
                pk: self.store.reservations[pk].node
                for pk in (r.key for r in members)
                if pk in self.store.reservations
            },
            "failures": entry.failures if entry else 0,
            "lastReason": entry.last_reason if entry else "",
            "queue": self.admission.gang_queue(spec, members[0].obj)[0]
            if spec is not None and members
            else None,
            "queueHold": self.admission.queue_holds[gang][1] if gang in self.admission.queue_holds else None,
            "preemption": self._describe_preemption(gang),
            "hold": self._describe_hold(gang),
            "pool": self._describe_pool(gang, spec),
            "heldFor": self._held_for(
                gang, phase, member_priority(members[0].obj, spec) if members else None
            ),
        }

    def _describe_hold(self, gang: GroupKey) -> dict[str, Any] | None:
        """The room held for the gang (holds.py), or why it has none while it waits."""
        h = self.ledger.holds.of(gang)
        if h is None:
            why = self.ledger.holds.why_none(gang)
            return {"none": why} if why else None
        drained, total = self.holding.drained(h)
        return {
            "domain": h.domain,
            "nodes": list(h.nodes),
            "drainedNodes": drained,
            "heldNodes": total,
            "rank": [x.gang for x in self.ledger.holds.all()].index(gang) + 1,
            "room": dict(h.room),
            "amounts": self._amounts(h),
            "queue": h.queue,
            "priority": h.priority,
            "heldForS": round(max(0.0, self.ledger.clock() - h.since_s), 3),
            "text": self.holding.holds_text(h),
        }

    def _describe_pool(self, gang: GroupKey, spec: Any) -> dict[str, Any] | None:
        """The gang's size-class pool (pools.py): the level its pools are domains of, and its class
        there. None: pools are off, or the gang has no pool level."""
        if spec is None:
            return None
        try:
            required = planning.tree_node(self.store, -1, spec.topology).required_level
        except TopologyError:
            return None  # its reason says why it cannot be planned at all
        got = self.pools.class_of(gang, required)
        if got is None:
            return None
        level, size = got
        return {"level": self.store.arrays.level_key(level), "class": size.value}

    def _amounts(self, h: Any) -> dict[str, dict[str, int]]:
        """node -> resource -> what the hold wants free there (what every other plan leaves it)."""
        names = self.store.resources.names
        return {
            node: {names[c]: int(v) for c, v in enumerate(row) if v and c < len(names)}
            for node, row in zip(h.nodes, h.hold.amounts.tolist(), strict=True)
        }

    def _held_for(self, gang: GroupKey, phase: str, priority: int | None) -> list[str]:
        """What a waiting gang plans around: each hold before it (holds.HoldBook.before), said as the
        holder's."""
        if phase != Phase.PENDING.value:
            return []
        return [self.holding.holds_text(h) for h in self.ledger.holds.before(gang, priority)]

    def _describe_preemption(self, gang: GroupKey) -> dict[str, Any] | None:
        p = self.ledger.preemption(gang)
        if p is None:
            return None
        terminating = set(self.ledger.terminating(p))
        return {
            "domain": p.domain,
            "priority": p.priority,
            "victimPriority": p.victim_priority,
            "gangs": list(p.gangs),
            "victims": [
                {
                    "pod": v.pod,
                    "node": v.node,
                    "priority": v.priority,
                    "gang": v.gang,
                    "gone": v.pod in p.held,
                    "terminating": v.pod in terminating,  # the hold lasts while any is
                }
                for v in p.victims.values()
            ],
            "where": dict(p.where),
            "claimed": {node: dict(room) for node, room in p.claimed.items()},
            "holdDeadline": p.hold_until,
            "holdLeftS": round(max(0.0, p.hold_until - self.ledger.clock()), 3),
            "reason": p.reason,
        }

    def describe_all(self) -> list[dict[str, Any]]:
        # and the gangs holding (or told why not) that no filter call brought to the ledger
        keys = set(self.ledger.gang_keys()) | {h.gang for h in self.ledger.holds.all()}
        keys |= set(self.ledger.holds.no_hold_gangs())
        return [d for k in sorted(keys) if (d := self.describe(k)) is not None]
