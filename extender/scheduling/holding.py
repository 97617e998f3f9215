"""Holding: which waiting gangs hold capacity, and where (the rule of extender.placement.backfill,
in the live service), so that a stream of small gangs never starves a large one.

Owns the pass that chooses the holds, run by the ticker when the cluster or the ledger changed, and
the nudge of a holder whose hold is ready. The holds themselves are the ledger's (holds.HoldBook).

Who holds: a gang whose quorum is ready, admitted by its queue, found to fit nowhere (and to
preempt and reclaim nothing), with no preemption under way and not backing off; or one whose
members kube-scheduler parked without asking the service (each alone fits no node's free room, so
its own filters passed no node), within its queue's limits. The waiting gangs are ranked by
priority (higher first), then by when they were created (their first member's creationTimestamp:
what a restarted service reads again), then by when first seen; the first `depth` that do not fit
now hold, each where the least is in use among the rows that fit it once drained, from what the
holds ranked before it leave. The head's hold moves only to rows with strictly less left
to drain, so its deficit only falls; a gang that fits no drained cluster gets no hold, and says so.
Holding is never a reason to evict: a hold waits for pods to end (only the preempt verb and the
preemption of a higher-priority gang evict, by their own rules).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from extender.model.group import GroupSpec, MembershipState
from extender.model.keys import GroupKey
from extender.model.priority import member_priority
from extender.model.timestamps import parse_time_s
from extender.placement import api as placement
from extender.placement import backfill
from extender.placement.pools import SizeClass
from extender.scheduling import messages, planning
from extender.scheduling.decisions import Effect, pod_ref
from extender.scheduling.holds import Held, HoldBook
from extender.scheduling.pooling import PoolMap
from extender.scheduling.telling import Telling
from extender.scheduling.view import View, marked_unschedulable
from extender.state.store import POD, is_live

log = logging.getLogger(__name__)

PASS_INTERVAL_S = 1.0
"""How often, at most, the holds are chosen again while only the cluster changes (pods ending on the
held rows, others starting around them); a gang newly unfit or gone is seen at the next tick."""


@dataclasses.dataclass(frozen=True)
class Waiting:
    """A gang that may hold: its definition, rank and what it asks for now."""

    key: GroupKey
    spec: GroupSpec
    priority: int
    since_s: float
    demand: planning.Demand | None  # None: it cannot be held for (why in `why`)
    queue: str | None
    why: str = ""
    created_s: float = math.inf  # its first live member's creationTimestamp (wall clock); inf: none

    @property
    def rank(self) -> tuple[int, float, float, GroupKey]:
        """Priority first; then the age the API server keeps (the same after a restart, and however
        this process first saw the gang), to the second it records; then when first seen waiting."""
        created = math.floor(self.created_s) if math.isfinite(self.created_s) else math.inf
        return (-self.priority, created, self.since_s, self.key)


class Holding:
    def __init__(
        self,
        view: View,
        telling: Telling,
        queue_of: Callable[[GroupSpec, dict], tuple[str | None, str]],
        queue_waiting: Callable[[GroupKey], bool],
        queue_refuses: Callable[[str, dict[str, int], GroupKey, dict[str, int]], str | None],
        pools: PoolMap | None = None,
    ) -> None:
        self.view = view
        self.pools = pools
        self.store = view.store
        self.ledger = view.ledger
        self.book: HoldBook = view.ledger.holds
        self.telling = telling
        self._queue_of = queue_of
        self._queue_waiting = queue_waiting
        self._queue_refuses = queue_refuses
        self._parked: dict[GroupKey, float] = {}  # gang -> when first seen parked (its rank's age)
        """Gangs with a member kube-scheduler parked (PodScheduled=False): a member that fits no node's
        free room alone (a whole-node GPU pod on a busy cluster) fails kube-scheduler's own filters,
        and the extender is never asked for it. Kept by the store's events; once a filter has shown
        the gang, the ledger's no-fit decides whether it may hold, and its age here stays the earlier
        one; a gang with no parked member left is dropped at the next pass."""
        view.store.add_listener(self._on_change)
        self._seen: tuple[int, int, int] = (-1, -1, -1)
        self._unfit: frozenset[GroupKey] = frozenset()  # the unfit gangs the last pass saw
        self._passed_s = float("-inf")
        self._ready: set[GroupKey] = set()  # holders already nudged for a ready hold
        self.released_s: list[float] = []  # seconds each ended hold was held, for the metrics

    # ----------------------------------------------------------------- the pass
    def tick(self) -> list[Effect]:
        """Choose the holds again when anything they depend on changed; nudge holders that fit now."""
        book = self.book
        if not book.settings.enabled:
            if len(book):
                book.clear()
            return []
        gen = (self.store.change_gen, self.ledger.gen, book.gen)
        now = self.ledger.clock()
        unfit = self._unfit
        if gen != self._seen:  # nothing changed: not even the set of unfit gangs is looked at
            unfit = frozenset(key for key, _ in self.ledger.unfit_gangs()) | frozenset(self._parked)
        # a gang newly unfit, or one gone from the wait, is seen at once; the drain of the held rows
        # (every pod that ends changes the cluster) at most every PASS_INTERVAL_S: a pass plans each
        # holder a few times over the whole cluster, which a busy cluster would pay on every tick
        due = unfit != self._unfit or now - self._passed_s >= PASS_INTERVAL_S
        if gen != self._seen and due:
            before = {h.gang: h for h in book.all()}
            held, none, starting = self.decide()
            self.ledger.set_holds(held, none, starting)
            for gang, old in before.items():
                if book.of(gang) is None:
                    self.released_s.append(max(0.0, now - old.since_s))
            del self.released_s[:-1000]  # bounded when nothing scrapes the metrics
            self._seen = (self.store.change_gen, self.ledger.gen, book.gen)
            self._unfit, self._passed_s = unfit, now
        effects: list[Effect] = []
        for h in book.all():
            if h.hold.ready(self.store.arrays):
                if h.gang not in self._ready:
                    self._ready.add(h.gang)
                    log.info("gang %s: its hold on %s is ready", h.gang, h.domain or "the cluster")
                    effects += self._nudge_ready(h.gang)
            else:
                self._ready.discard(h.gang)
        self._ready &= {h.gang for h in book.all()}
        return effects

    def _on_change(self, event: str, kind: tuple[str, str], obj: dict[str, Any]) -> None:
        if kind != POD or event == "DELETED" or (obj.get("spec") or {}).get("nodeName"):
            return
        if not marked_unschedulable(obj):
            return
        m = self.store.membership_of(obj)
        if m.state is MembershipState.MEMBER and m.group is not None and m.group.is_gang():
            self._parked.setdefault(m.group.key, self.ledger.clock())

    def _candidates(self) -> list[tuple[GroupKey, GroupSpec]]:
        """The gangs found to fit nowhere by a filter (the ledger's), and those kube-scheduler parked
        that hold no plan (their current definition), once each."""
        out = dict(self.ledger.unfit_gangs())
        for key in sorted(self._parked):
            members = [r for r in self.store.group_members(key) if is_live(r.obj)]
            parked = [r for r in members if not r.node_name and marked_unschedulable(r.obj)]
            if not parked:
                del self._parked[key]  # bound or gone
                continue
            if key in out or self.ledger.entry(key) is not None:
                continue  # a filter has seen it: the ledger says whether it fits (its age stays here)
            spec = self.view.spec_of(key, members)
            if spec is not None:
                out[key] = spec
        return sorted(out.items())

    def waiting(self) -> list[Waiting]:
        """The gangs that may hold, in rank order."""
        out = []
        for key, spec in self._candidates():
            if self.ledger.preemption(key) is not None or self.ledger.backoff_left(key) > 0:
                continue
            if self._queue_waiting(key):
                continue  # its queue has not admitted it: it holds nothing the queue did not grant
            members = [r for r in self.store.group_members(key) if is_live(r.obj)]
            if not members or self.view.spec_of(key, members) != spec:
                continue  # gone, or redefined: the filter finds again whether it fits
            bound = self.ledger.bound_counts(spec)
            if self.ledger.quorum_bound(spec, bound):
                continue  # running: what it still places goes pod by pod
            counts = self.view.live_leaf_counts(key, spec)
            leaves = spec.ready_leaves(counts)
            if leaves is None:
                continue
            planned = [planning.Member(r, self.store.membership(r).subgroup) for r in members]
            entry = self.ledger.entry(key)
            # its age: when it was first seen waiting, by a filter (the ledger's entry) or parked by
            # kube-scheduler's own filters, whichever came first. A parked gang a filter sees later
            # (a node freed in kube-scheduler's view) must not lose its place to gangs since
            since = entry.since if entry is not None and entry.since is not None else math.inf
            since = min(since, self._parked.get(key, math.inf))
            if since == math.inf:
                since = self.ledger.clock()
            queue, _ = self._queue_of(spec, members[0].obj)
            try:
                demand = self._demand(key, spec, planned, leaves)
            except Exception as exc:  # a topology the filter refuses: it says why there
                log.debug("gang %s: no hold: %s", key, exc)
                continue
            why = ""
            if demand.unoffered:
                why = messages.unoffered_text(list(demand.unoffered))
            created = [parse_time_s((r.obj.get("metadata") or {}).get("creationTimestamp")) for r in members]
            out.append(
                Waiting(
                    key,
                    spec,
                    member_priority(members[0].obj, spec),
                    since,
                    None if why else demand,
                    queue,
                    why,
                    min((c for c in created if c is not None), default=math.inf),
                )
            )
        out.sort(key=lambda w: w.rank)
        return out

    def _demand(
        self, key: GroupKey, spec: GroupSpec, planned: list[planning.Member], leaves: Sequence[str | None]
    ) -> planning.Demand:
        """What the gang's hold is shaped by, in the filter's two passes: the nodes kube-scheduler
        refused its members avoided, unless they stand in the way of a fit now, which the filter's
        plan then takes (it drops them there). Shaped by them, a gang that fits now holds rows that
        must drain instead, and may wait for ever; shaped without them where it fits nowhere now, a
        refusal that does not go away (a port, a plugin the service does not model) would steer its
        drain onto nodes it can never have."""
        demand = planning.gang_demand(self.store, self.ledger, spec, planned, leaves, me=None)
        if not self.ledger.excluded(key) or demand.unoffered or self._fits_now(demand):
            return demand
        loose = planning.gang_demand(
            self.store, self.ledger, spec, planned, leaves, me=None, avoid_refused=False
        )
        return loose if self._fits_now(loose) else demand

    def _fits_now(self, demand: planning.Demand) -> bool:
        arrays = planning.with_slots(self.store, [demand])
        return placement.plan_gang(arrays, demand.request).outcome is placement.Outcome.PLACED

    def decide(self) -> tuple[list[Held], dict[GroupKey, str], dict[GroupKey, frozenset[GroupKey]]]:
        """The holds, from the cluster as it is and the holds of the last pass, by the rule of
        extender.placement.backfill.choose_holds (the bench's quality runs the same), each refused
        when its queue cannot be charged the room."""
        previous = {h.gang: h for h in self.book.all() if self._still_valid(h)}
        waiting = self.waiting()
        by_key = {w.key: w for w in waiting}
        none = {w.key: f"no hold: {w.why}" for w in waiting if w.demand is None}
        candidates = [(w.key, w.demand.request) for w in waiting if w.demand is not None]
        arrays = planning.with_slots(self.store, [w.demand for w in waiting if w.demand is not None])

        def refuse(key: Hashable, hold: backfill.Hold, kept: Sequence[backfill.Hold]) -> str | None:
            return self._refused_by_queue(by_key[str(key)], [by_key[str(h.owner)] for h in kept], previous)

        within: dict[Hashable, np.ndarray] = {}
        small: dict[Hashable, np.ndarray] = {}
        classes: dict[Hashable, Hashable] = {}  # the hold depth counts per size class
        for key, request in candidates if self.pools is not None else ():
            if by_key[str(key)].demand.one_per_node:
                continue  # planned apart from the pools (planning.plan_members): held as planned
            pooled = self.pools.allowed(request)
            if pooled is not None:
                within[key], classes[key] = pooled
                if pooled[1] is SizeClass.SMALL:
                    small[key] = pooled[0]  # a small gang holds in its pool when that could fit it
        chosen = backfill.choose_holds(
            arrays,
            candidates,
            [h.hold for h in previous.values()],
            depth=self.book.settings.depth,
            refuse=refuse,
            within=within,
            hold_within=small,
            classes=classes,
        )
        kept = []
        for hold in chosen.holds:
            old = previous.get(str(hold.owner))
            if old is not None and old.hold is hold:
                kept.append(old)
            else:
                hold = dataclasses.replace(hold, amounts=planning.without_slots(self.store, hold.amounts))
                kept.append(self._held(by_key[str(hold.owner)], hold, since_s=old.since_s if old else None))
        none.update({str(k): f"no hold: {why}" for k, why in chosen.none.items()})
        starting = {str(k): frozenset(str(o) for o in owners) for k, owners in chosen.starting.items()}
        return kept, none, starting

    def _refused_by_queue(
        self, w: Waiting, kept: list[Waiting], previous: dict[GroupKey, Held]
    ) -> str | None:
        """Why the gang's queue (or an ancestor) cannot take the held room now, or None. The queue
        book charges the holds of the last pass already: the gang's own is credited back, and the
        holds new in this pass are added to its need (all of them, whatever their queue: a parent's
        limit is shared)."""
        if w.queue is None:
            return None
        need = self._room(w)
        for other in kept:
            if other.key not in previous:
                for r, v in self._room(other).items():
                    need[r] = need.get(r, 0) + v
        prior = previous.get(w.key)
        credit = dict(prior.room) if prior is not None else {}
        return self._queue_refuses(w.queue, need, w.key, credit)

    # ----------------------------------------------------------------- parts
    @staticmethod
    def _room(w: Waiting) -> dict[str, int]:
        """What the gang's members needed now request, summed by resource name."""
        room: dict[str, int] = {}
        for recs in w.demand.chosen if w.demand is not None else ():
            for m in recs:
                for r, v in m.rec.requests.items():
                    room[r] = room.get(r, 0) + int(v)
        return room

    def _held(self, w: Waiting, hold: backfill.Hold, *, since_s: float | None) -> Held:
        room = self._room(w)
        return Held(
            gang=w.key,
            hold=hold,
            nodes=tuple(self.store.row_names[int(r)] for r in hold.rows),
            queue=w.queue,
            room=room,
            priority=w.priority,
            since_s=self.ledger.clock() if since_s is None else since_s,
            domain=messages.domain_text(self.store, hold.plan) if hold.plan.domains else "",
            row_domains=self.store.arrays.domains[:, hold.rows.astype(np.int64)].copy(),
        )

    def _still_valid(self, h: Held) -> bool:
        """Every held row is still the node it was, schedulable, and in the domains it was in."""
        names, arrays = self.store.row_names, self.store.arrays
        if not h.hold.usable(arrays) or any(
            names.get(int(r)) != n for r, n in zip(h.hold.rows, h.nodes, strict=True)
        ):
            return False
        if h.row_domains is None:
            return True
        levels = h.row_domains.shape[0]
        return bool((arrays.domains[:levels, h.hold.rows.astype(np.int64)] == h.row_domains).all())

    def _nudge_ready(self, gang: GroupKey) -> list[Effect]:
        """Bring back every parked member of a gang whose hold is ready: those the service turned away,
        and those kube-scheduler's own filters parked (no node had room for one alone)."""
        effects = self.telling.nudge_turned_away(gang, "hold-ready")
        nudged = {(e.namespace, e.name) for e in effects}
        for rec in self.store.group_members(gang):
            ref = pod_ref(rec.key)
            if not rec.node_name and is_live(rec.obj) and marked_unschedulable(rec.obj) and ref not in nudged:
                effects.append(Effect("nudge", *ref, {"value": f"{gang}:hold-ready"}))
        return effects

    def take_metrics(self) -> tuple[int, float, list[float]]:
        """(holds in place, the head hold's drained share, seconds of each hold ended since the last
        look)."""
        held = self.book.all()
        share = 0.0
        if held:
            done, total = self.drained(held[0])
            share = done / total if total else 1.0
        ended, self.released_s = self.released_s, []
        return len(held), share, ended

    # ----------------------------------------------------------------- what is said
    def drained(self, h: Held) -> tuple[int, int]:
        """(held rows with the holder's amount free, held rows)."""
        arrays = self.store.arrays
        rows = h.hold.rows
        if not rows.size:
            return 0, 0
        width = h.hold.amounts.shape[1]
        free = (arrays.free[rows, :width] >= h.hold.amounts).all(axis=1)
        return int(free.sum()), int(rows.size)

    def holds_text(self, h: Held) -> str:
        done, total = self.drained(h)
        where = h.domain or f"{total} nodes"
        return f"gang {h.gang} holds {where} ({done} of {total} nodes drained)"
