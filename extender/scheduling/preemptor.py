"""Preemptor: where a gang that fits nowhere would fit by evicting lower-priority pods, and whom.

Pure over the store and the ledger; nothing is evicted or held here (the scheduler emits the
evictions, the ledger holds the room as each victim goes).

The rules:
- a victim has a strictly lower priority than the preemptor, is bound (or held for a plan) and
  live, and is not already being evicted (for another preemptor, or by this service's whole-gang disruption);
- a member of a gang is evicted with its whole gang, never alone: the gang is one unit, with the
  highest priority among its members, and is a candidate only when every member is lower;
- a domain is one of the gang's required level (the whole cluster when it has none). In each, the
  victims are the fewest units of the lowest priority whose eviction lets the quorum fit there, as
  the placement core says with the victims' requests given back: first the lowest priority
  ceiling that suffices, then every unit that is not needed is dropped, gangs first (breaking
  fewer gangs), the highest priority and largest first;
- the chosen domain is the cheapest: lowest highest-victim priority, then fewest gangs broken,
  then fewest pods, then domain name. No domain that can be freed enough: no plan, nothing evicted.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Sequence

import numpy as np

from extender.model.group import GroupSpec, MembershipState
from extender.model.keys import GroupKey, PodKey
from extender.placement.layout import ClusterArrays
from extender.scheduling import messages, planning
from extender.scheduling.ledger import GangLedger, Victim
from extender.state.store import ClusterStore, PodRecord, is_live

MAX_UNITS_PER_DOMAIN = 256
"""Candidate units tried in one domain: bounds the work of one plan (each trial is a placement)."""


@dataclasses.dataclass(frozen=True)
class Unit:
    """What is evicted together: a whole gang, or one plain pod."""

    name: str  # the gang's key or the pod's
    gang: GroupKey | None
    victims: tuple[Victim, ...]
    priority: int  # the highest among its pods
    freed: tuple[tuple[int, np.ndarray], ...]  # (row, request vector) of each pod that holds room


@dataclasses.dataclass(frozen=True)
class PreemptionPlan:
    domain: str  # "rack r1"; "" for the whole cluster
    units: tuple[Unit, ...]
    where: dict[PodKey, str]  # where the preemptor's members fit once the victims are gone

    @property
    def victims(self) -> tuple[Victim, ...]:
        return tuple(v for u in self.units for v in u.victims)

    @property
    def gangs(self) -> tuple[GroupKey, ...]:
        return tuple(sorted(u.gang for u in self.units if u.gang is not None))

    @property
    def plain_pods(self) -> tuple[PodKey, ...]:
        return tuple(sorted(u.victims[0].pod for u in self.units if u.gang is None))

    @property
    def victim_priority(self) -> int:
        return max((u.priority for u in self.units), default=0)

    def cost(self) -> tuple[int, int, int, str]:
        return (self.victim_priority, len(self.gangs), len(self.victims), self.domain)


def _row_of(store: ClusterStore, rec: PodRecord) -> tuple[int, str]:
    """Where the pod holds room: its bound row, or the row of its plan's hold; (-1, "") if none."""
    if rec.bound_row >= 0 and rec.node_name:
        return rec.bound_row, rec.node_name
    res = store.reservations.get(rec.key)
    if res is not None and store.row_names.get(res.row) == res.node:
        return res.row, res.node
    return -1, ""


def candidate_units(
    store: ClusterStore,
    ledger: GangLedger,
    preemptor: GroupKey,
    priority: int,
    admit: Callable[[Unit], bool] | None = None,
    spared: Callable[[PodRecord], bool] | None = None,
) -> list[Unit]:
    """Every unit the preemptor may evict: whole gangs and plain pods, all strictly lower, and each one
    `admit` accepts when it is given (a reclaim's queue rules). `spared`: see plan_preemption."""
    units: list[Unit] = []
    seen_gangs: set[GroupKey] = set()
    for rec in store.pods.values():
        if not rec.node_name or not rec.live or rec.bound_row < 0:
            continue
        m = store.membership(rec)
        group = m.group if m.state is MembershipState.MEMBER else None
        if group is not None and group.key == preemptor:
            continue
        if group is not None and group.is_gang():
            if group.key in seen_gangs:
                continue
            seen_gangs.add(group.key)
            unit = _gang_unit(store, ledger, group.key, priority, spared)
        else:
            unit = _pod_unit(store, ledger, rec, priority, spared)
        if unit is not None and (admit is None or admit(unit)):
            units.append(unit)
    return units


def _victim(store: ClusterStore, rec: PodRecord, gang: GroupKey | None) -> tuple[Victim, int]:
    row, node = _row_of(store, rec)
    priority = store.rank(rec)
    return Victim(rec.key, rec.uid, node, dict(rec.requests), priority, gang), row


def _taken(ledger: GangLedger, rec: PodRecord, spared: Callable[[PodRecord], bool] | None) -> bool:
    """Already being evicted, or spared for now: another preemption's victim, or one whose eviction a
    preemption asked or the API server accepted though the watch shows it live yet (its preemption
    since ended): asked once, never a second time; or one the caller spares (`spared`: a member the
    whole-gang disruption marked and is evicting, asked again until it goes; a victim a disruption
    budget refused a moment ago)."""
    return (
        ledger.victim_of(rec.key) is not None
        or ledger.eviction_under_way(rec.key, rec.uid)
        or (spared is not None and spared(rec))
    )


def _pod_unit(
    store: ClusterStore,
    ledger: GangLedger,
    rec: PodRecord,
    priority: int,
    spared: Callable[[PodRecord], bool] | None,
) -> Unit | None:
    if store.rank(rec) >= priority or _taken(ledger, rec, spared):
        return None
    v, row = _victim(store, rec, None)
    return Unit(rec.key, None, (v,), v.priority, ((row, store.vector(v.requests)),))


def _gang_unit(
    store: ClusterStore,
    ledger: GangLedger,
    gang: GroupKey,
    priority: int,
    spared: Callable[[PodRecord], bool] | None,
) -> Unit | None:
    members = [r for r in store.group_members(gang) if is_live(r.obj)]
    victims, freed = [], []
    for rec in members:
        if store.rank(rec) >= priority or _taken(ledger, rec, spared):
            return None  # one member it may not evict keeps the whole gang
        v, row = _victim(store, rec, gang)
        victims.append(v)
        if row >= 0:
            freed.append((row, store.vector(v.requests)))
    if not freed:
        return None
    return Unit(gang, gang, tuple(victims), max(v.priority for v in victims), tuple(freed))


def plan_preemption(
    store: ClusterStore,
    ledger: GangLedger,
    group: GroupSpec,
    members: Sequence[planning.Member],
    leaves: Sequence[str | None],
    *,
    me: planning.Member,
    priority: int,
    admit: Callable[[Unit], bool] | None = None,
    enough: Callable[[Sequence[Unit]], bool] | None = None,
    spared: Callable[[PodRecord], bool] | None = None,
    coming: Callable[[PodRecord], bool] | None = None,
) -> PreemptionPlan | None:
    """The cheapest preemption that lets the gang's quorum fit in one domain, or None. A plan with no
    victims means the gang fits somewhere as things are: there is nothing to preempt. `admit`: only
    units it accepts are victims (see candidate_units). `enough`: the victims chosen must also
    satisfy it (its queue admits the gang once they are gone), besides letting the quorum fit.
    `spared`: pods that are no victims now (see _taken); `coming`: which pods the whole-gang
    disruption marked have their room coming (it asks their eviction until they go)."""
    arrays = store.arrays
    levels = planning.constraint_levels(store, group, None)
    level = levels[0] if levels else -1
    rows_in_use = np.array(sorted(store.row_names), dtype=np.int32)
    eligible = store.eligible_mask(me.rec.obj)
    offered = rows_in_use if eligible is None else rows_in_use[eligible[rows_in_use]]
    units = candidate_units(store, ledger, group.key, priority, admit, spared)
    if not len(offered):
        return None
    if level >= 0:
        ids = arrays.domains[level, rows_in_use]
        domains = sorted({int(d) for d in ids if d >= 0}, key=lambda d: arrays.domain_name(level, d))
    else:
        domains = [-1]

    # the room of lower-priority pods already going (Terminating) is the preemptor's at no cost: a
    # domain they free enough needs no victim, so no second set is evicted while the first runs out
    # its grace period (after a restart, say, which lost the record of whom this gang evicted;
    # kube-scheduler waits for such victims too)
    base_free = _with_going(store, ledger, arrays, priority, coming)

    def trial(chosen: Sequence[Unit], domain: int) -> planning.GangPlan | None:
        if enough is not None and not enough(chosen):
            return None
        trial_arrays = copy.copy(arrays)
        trial_arrays.free = base_free.copy()
        trial_arrays.schedulable = arrays.schedulable.copy()
        for u in chosen:
            for row, vec in u.freed:
                trial_arrays.free[row] += vec
        if domain >= 0:
            trial_arrays.schedulable &= arrays.domains[level] == domain
        # evicting never makes a hold's room (of a holder at least the preemptor's priority)
        ledger.holds.take_out(trial_arrays.free, for_gang=group.key, priority=priority)
        plan = planning.plan_members(
            store,
            ledger,
            group,
            members,
            leaves,
            me=me.key,
            offered_rows=offered,
            avoid_refused=False,
            arrays=trial_arrays,
        )
        return plan if plan is not None and not plan.reason else None

    scale = np.maximum(arrays.allocatable[: arrays.n_rows].max(axis=0, initial=0), 1)
    floor = _demand_floor(store, ledger, group, members, leaves)
    usable = arrays.schedulable[: arrays.n_rows]
    by_domain: dict[int, list[Unit]] = {d: [] for d in domains}
    for u in units:
        touched = {int(arrays.domains[level, row]) for row, _ in u.freed} if level >= 0 else {-1}
        for d in touched & by_domain.keys():
            by_domain[d].append(u)
    # first, what each domain could free at best, in sum: a cheap bound that rules most out
    candidates: list[tuple[int, str, int, np.ndarray, list[Unit]]] = []
    for d in domains:
        inside = usable & (arrays.domains[level, : arrays.n_rows] == d) if d >= 0 else usable
        name = f"{messages.level_name(store, level)} {arrays.domain_name(level, d)}" if d >= 0 else ""
        room = base_free[: arrays.n_rows][inside].sum(axis=0)
        if not np.any(room < floor):
            fits = trial([], d)
            if fits is not None:
                # room without evicting anyone: nothing to preempt (kube-scheduler did not offer it)
                return PreemptionPlan(name, (), {pk: p.node for pk, (p, _) in fits.assignment.items()})
        local = sorted(by_domain[d], key=lambda u: (u.priority, len(u.victims), u.name))[
            :MAX_UNITS_PER_DOMAIN
        ]
        lowest = None  # the lowest priority ceiling whose victims could free enough, in sum
        for u in local:
            for row, vec in u.freed:
                if inside[row]:
                    room = room + vec
            if not np.any(room < floor):
                lowest = u.priority
                break
        if lowest is not None:
            candidates.append((lowest, name, d, inside, local))
    best: PreemptionPlan | None = None
    for lowest, name, d, _inside, local in sorted(candidates, key=lambda c: (c[0], c[1])):
        if best is not None and lowest > best.victim_priority:
            break  # every domain left needs a higher priority evicted than the best one found
        chosen: list[Unit] | None = None
        for ceiling in sorted({u.priority for u in local if u.priority >= lowest}):
            below = [u for u in local if u.priority <= ceiling]
            if trial(below, d) is not None:
                chosen = below
                break
        if chosen is None:
            continue
        for u in sorted(chosen, key=lambda u: _drop_order(u, scale)):
            fewer = [x for x in chosen if x is not u]
            if trial(fewer, d) is not None:
                chosen = fewer
        placed = trial(chosen, d)
        if placed is None:  # pragma: no cover - the last accepted trial fitted
            continue
        where = {pk: p.node for pk, (p, _) in placed.assignment.items()}
        candidate = PreemptionPlan(name, tuple(sorted(chosen, key=lambda u: u.name)), where)
        if best is None or candidate.cost() < best.cost():
            best = candidate
    return best


def _with_going(
    store: ClusterStore,
    ledger: GangLedger,
    arrays: ClusterArrays,
    priority: int,
    coming: Callable[[PodRecord], bool] | None,
) -> np.ndarray:
    """`arrays.free` with the room of bound pods below `priority` that are going given back: being
    deleted (Terminating, in their grace period), their eviction asked or accepted though the watch
    has not shown it yet, or marked by the whole-gang disruption while it evicts them (`coming`),
    asking until they go (a budget refusing it for now; after a restart too: the mark is on the
    pod). O(those pods), from the store's indexes and the ledger's evictions."""
    free = arrays.free
    evicted = (store.pods.get(pk) for pk in ledger.evictions_under_way())
    unseen = [
        r for r in evicted if r is not None and is_live(r.obj) and ledger.eviction_under_way(r.key, r.uid)
    ]
    marked = (
        [r for r in store.marked_to_go() if coming(r) and not ledger.eviction_under_way(r.key, r.uid)]
        if coming is not None
        else []
    )
    for rec in itertools.chain(store.leaving(), unseen, marked):
        if rec.bound_row < 0 or rec.terminal or store.rank(rec) >= priority:
            continue
        if free is arrays.free:
            free = arrays.free.copy()
        free[rec.bound_row] += store.vector(rec.requests)
    return free


def _demand_floor(
    store: ClusterStore,
    ledger: GangLedger,
    group: GroupSpec,
    members: Sequence[planning.Member],
    leaves: Sequence[str | None],
) -> np.ndarray:
    """A lower bound of what the gang still needs: the unbound quorum of the leaves being placed
    times its smallest member."""
    pending = [m for m in members if not (m.rec.node_name or ledger.is_assumed(m.key))]
    if not pending:
        return np.zeros(store.arrays.n_res, dtype=np.int64)
    smallest = np.min(np.stack([store.vector(m.rec.requests) for m in pending]), axis=0)
    count = 0
    for leaf in leaves:
        bound = sum(1 for m in members if m.leaf == leaf and m not in pending)
        count += max(0, group.leaf_quorum(leaf) - bound)
    return smallest * count


def _drop_order(u: Unit, scale: np.ndarray) -> tuple[bool, int, float, str]:
    """Which unit to try leaving alone first: gangs (fewer broken), the highest priority, then the
    one freeing least (a unit freeing little is the likeliest not to be needed)."""
    freed = sum(float((vec / scale).sum()) for _, vec in u.freed)
    return (u.gang is None, -u.priority, freed if u.gang is None else -len(u.victims), u.name)


def reason_text(gang: GroupKey, plan: PreemptionPlan) -> str:
    """What a waiting preemptor is told: whom it evicts, where, and that it waits for them to go."""
    parts = []
    if plan.gangs:
        shown = ", ".join(plan.gangs[:3]) + (
            f" and {len(plan.gangs) - 3} more" if len(plan.gangs) > 3 else ""
        )
        parts.append(f"{len(plan.gangs)} gang{'s' if len(plan.gangs) != 1 else ''} ({shown})")
    pods = plan.plain_pods
    if pods:
        parts.append(f"{len(pods)} pod{'s' if len(pods) != 1 else ''}")
    where = f" in {plan.domain}" if plan.domain else ""
    return (
        f"gang {gang}: preempting {' and '.join(parts)}{where} (priority <= {plan.victim_priority}); "
        "waiting for them to go"
    )
