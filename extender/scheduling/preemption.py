"""The preempt verb's choice: which of kube-scheduler's candidate nodes it may evict victims on.

kube-scheduler's own preemption dry run (DefaultPreemption, in-tree plugins only) knows nothing of
gangs or of the capacity this service holds for planned gangs. It proposes candidate nodes, each
with the victims whose eviction would let the preemptor fit, and lets this verb narrow them; it
then picks one of the nodes answered and evicts that node's victims (extender-protocol.md §2.6).
This module judges each candidate against the store snapshot and the ledger, synchronously, and
writes nothing: kube-scheduler evicts, and the whole-gang follow-up of an eviction is not decided
here.

A candidate *breaks* a gang when its victims
- touch any member of a group whose disruption mode is ALL (a JobSet's `disruptionMode: {all: {}}`,
  a PodGroup's "PodGroup"): such a group is only ever disrupted whole, so one victim costs it all; or
- take a gang whose quorum is in place (bound members, plus members of its plan on their way to
  bind) below that quorum, counted as KAI counts it (each leaf's minMember, each parent's
  minSubGroup). An elastic gang above its quorum loses members without breaking.

The order, from first to last look:
1. a candidate without a victim is dropped (kube-scheduler rejects a node without one);
2. a candidate whose freed room another pod's or gang's hold (a plan's reservation, a bind in
   flight) takes, so that the preemptor still would not fit there after the eviction, is vetoed:
   evicting would disrupt pods for nothing;
3. with KAI queues in use, a candidate whose victims the preemptor's queue rules forbid is vetoed
   (`queue_rule`, the scheduler's): a victim of the preemptor's own queue may go (priority decides,
   and the preemptor's queue limit is checked with those victims gone), a victim of another queue
   only as a reclaim would take it (that queue over its fair share, kept at its quota, the
   preemptor's within its own);
4. when some remaining candidate breaks no gang, every candidate that breaks one is vetoed, and all
   those that break none are kept (kube-scheduler then applies its own preferences among them:
   PDB violations, victims' priorities and counts);
5. when every remaining candidate breaks a gang, only the best are kept, by
   (a) fewest gangs broken, (b) lowest priority of the broken gangs (a gang's priority is its
   highest member's; a candidate's is that of the highest gang it breaks), (c) fewest victims,
   (d) lowest sum of the victims' priorities. Candidates equal on all four are all kept.
The answer is always a subset of the candidates, each with exactly the victims it came with.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from extender.model.group import Disruption, GroupSpec, MembershipState
from extender.model.keys import GroupKey, pod_key
from extender.model.priority import member_priority
from extender.scheduling import messages
from extender.scheduling.ledger import GangLedger
from extender.state.store import ClusterStore, PodRecord, is_live


class Outcome(enum.Enum):
    """What became of one candidate node (the `outcome` label of the candidates counter)."""

    KEPT = "kept"
    VETOED_BREAKS_GANG = "vetoed-breaks-gang"
    VETOED_RESERVATION = "vetoed-reservation"
    VETOED_QUEUE = "vetoed-queue"
    DROPPED_NO_VICTIM = "dropped-no-victim"


@dataclasses.dataclass(frozen=True)
class Broken:
    """A gang a candidate's victims would break, and why."""

    gang: GroupKey
    priority: int  # the gang's highest member priority
    why: str


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One candidate node as judged: its victims' cost and what became of it."""

    node: str
    outcome: Outcome
    victims: int
    victim_priority: int  # sum over the victims
    broken: tuple[Broken, ...] = ()
    why: str = ""

    def rank(self) -> tuple[int, int, int, int]:
        """Lower is better (step 5 of the module docstring)."""
        worst = max((b.priority for b in self.broken), default=0)
        return (len(self.broken), worst, self.victims, self.victim_priority)


@dataclasses.dataclass
class PreemptDecision:
    victims: dict[str, dict[str, Any]]
    """The reply: node -> MetaVictims, exactly as the candidate came (kept candidates only)."""
    candidates: dict[str, Candidate]

    def counts(self) -> dict[Outcome, int]:
        out: dict[Outcome, int] = {}
        for c in self.candidates.values():
            out[c.outcome] = out.get(c.outcome, 0) + 1
        return out

    def summary(self) -> str:
        """One line naming every candidate not kept and why, for the log."""
        parts = [
            f"{c.node} {c.outcome.value} ({c.why})"
            for c in self.candidates.values()
            if c.outcome is not Outcome.KEPT
        ]
        return "; ".join(parts)


def choose(
    store: ClusterStore,
    ledger: GangLedger,
    pod: dict[str, Any],
    requests: Mapping[str, int],
    victims: Mapping[str, dict[str, Any]],
    queue_rule: Callable[[Sequence[PodRecord]], str] | None = None,
) -> PreemptDecision:
    """Judge every candidate node (node -> {"Pods": [{"UID": ...}], "NumPDBViolations": n}) of the
    preemptor `pod` (as kube-scheduler sent it; `requests` are its requests); every node must be in
    the store (the caller checks). `queue_rule`: why a candidate's victims may not go for the
    preemptor's queue ("" when they may); None when queues are not in use."""
    by_uid = _victim_records(store, victims)
    holds = _holds_by_node(store, ledger, pod)
    request, missing = store.request_vector(dict(requests))
    gangs = _Gangs(store, ledger)
    judged: dict[str, Candidate] = {}
    for node, meta in victims.items():
        uids = [str(p.get("UID", "")) for p in meta.get("Pods") or ()]
        recs = list({u: rec for u in uids if (rec := by_uid.get(u)) is not None}.values())  # once each
        prio = sum(store.rank(r) for r in recs)
        if not uids:
            judged[node] = Candidate(node, Outcome.DROPPED_NO_VICTIM, 0, 0, why="no victim")
            continue
        blocked = "" if missing else _held_room(store, node, recs, request, holds)
        if blocked:
            judged[node] = Candidate(node, Outcome.VETOED_RESERVATION, len(uids), prio, why=blocked)
            continue
        refused = queue_rule(recs) if queue_rule is not None else ""
        if refused:
            judged[node] = Candidate(node, Outcome.VETOED_QUEUE, len(uids), prio, why=refused)
            continue
        broken = gangs.broken_by(recs)
        why = "; ".join(b.why for b in broken)
        judged[node] = Candidate(node, Outcome.KEPT, len(uids), prio, broken, why)
    _veto_breaking(judged)
    kept = {n: victims[n] for n, c in judged.items() if c.outcome is Outcome.KEPT}
    return PreemptDecision(kept, judged)


def _veto_breaking(judged: dict[str, Candidate]) -> None:
    """Steps 4 and 5: among the candidates still kept, keep those that break none, else the best."""
    kept = [c for c in judged.values() if c.outcome is Outcome.KEPT]
    if not kept:
        return
    if any(not c.broken for c in kept):
        best = None
        why = "breaks a gang while another candidate breaks none"
    else:
        best = min(c.rank() for c in kept)
        why = "breaks more or higher-priority gangs, or costs more victims, than another candidate"
    for c in kept:
        if c.broken and c.rank() != best:
            judged[c.node] = dataclasses.replace(c, outcome=Outcome.VETOED_BREAKS_GANG, why=f"{c.why}: {why}")


def _victim_records(store: ClusterStore, victims: Mapping[str, dict[str, Any]]) -> dict[str, PodRecord]:
    """uid -> the cached pod, for every victim the cache holds (an unknown one counts as a plain pod
    that frees nothing: the cache has not seen it, so its room was never counted as taken either)."""
    wanted = {str(p.get("UID", "")) for meta in victims.values() for p in meta.get("Pods") or ()}
    if not wanted:
        return {}
    return {rec.uid: rec for rec in store.pods.values() if rec.uid in wanted}


@dataclasses.dataclass
class _Holds:
    """The capacity held on one node: the preemptor's own (its plan, its gang's) and everyone else's."""

    own: list[dict[str, int]] = dataclasses.field(default_factory=list)
    others: list[dict[str, int]] = dataclasses.field(default_factory=list)
    holders: set[str] = dataclasses.field(default_factory=set)  # who the others are, for the reason


def _holds_by_node(store: ClusterStore, ledger: GangLedger, pod: dict[str, Any]) -> dict[str, _Holds]:
    meta = pod.get("metadata") or {}
    me = pod_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    m = store.membership_of(pod)
    my_gang = m.group.key if m.state is MembershipState.MEMBER and m.group is not None else None
    out: dict[str, _Holds] = {}
    for pk, res in store.reservations.items():
        gang = ledger.gang_of(pk)
        h = out.setdefault(res.node, _Holds())
        if pk == me or (gang is not None and gang == my_gang):
            h.own.append(res.requests)
        else:
            h.others.append(res.requests)
            h.holders.add(f"gang {gang}" if gang is not None else f"pod {pk}")
    return out


def _held_room(
    store: ClusterStore, node: str, victims: list[PodRecord], request: np.ndarray, holds: Mapping[str, _Holds]
) -> str:
    """Why the preemptor would still not fit on `node` once its victims are gone, because others hold
    the room ("" when it would fit, or when nothing of anyone else's is held there)."""
    h = holds.get(node)
    if h is None or not h.others:
        return ""  # nothing of ours stands in the way; kube-scheduler's own dry run judged the fit
    row = store.node_rows[node]
    room = store.arrays.free[row].astype(np.int64, copy=True)
    for rec in victims:
        if rec.bound_row == row:
            room += store.vector(rec.requests)
    for requests in h.own:
        room += store.vector(requests)
    if (room >= request).all():
        return ""
    shown = sorted(h.holders)
    who = ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
    return f"the room its victims would free is held for {who}; the preemptor would still not fit"


class _Gangs:
    """The groups the victims belong to, looked up once per call."""

    def __init__(self, store: ClusterStore, ledger: GangLedger) -> None:
        self.store = store
        self.ledger = ledger
        self._present: dict[GroupKey, dict[str | None, int]] = {}
        self._priority: dict[GroupKey, int] = {}

    def broken_by(self, victims: Iterable[PodRecord]) -> tuple[Broken, ...]:
        groups: dict[GroupKey, tuple[GroupSpec, list[PodRecord]]] = {}
        for rec in victims:
            m = self.store.membership(rec)
            if m.state is not MembershipState.MEMBER or m.group is None:
                continue
            groups.setdefault(m.group.key, (m.group, []))[1].append(rec)
        out = []
        for key, (spec, recs) in sorted(groups.items()):
            why = self._breaks(spec, recs)
            if why:
                out.append(Broken(key, self._gang_priority(spec), why))
        return tuple(out)

    def _breaks(self, spec: GroupSpec, victims: list[PodRecord]) -> str:
        if spec.disruption is Disruption.ALL:
            return f"{messages.label(spec)} is disrupted only whole (disruption mode all)"
        if not spec.is_gang():
            return ""
        present = self._present_counts(spec)
        if not any(present.values()) or spec.ready_leaves(present) is None:
            return ""  # not at quorum now: no quorum to take away (a stale gang is another matter)
        after = dict(present)
        gone = 0
        for rec in victims:
            if is_live(rec.obj) and (rec.node_name or self.ledger.is_assumed(rec.key)):
                leaf = self.store.membership(rec).subgroup
                after[leaf] = after.get(leaf, 0) - 1
                gone += 1
        if spec.ready_leaves(after) is not None:
            for leaf, n in sorted(after.items(), key=lambda kv: str(kv[0])):
                need = spec.leaf_quorum(leaf)
                if 0 < n < need <= present.get(leaf, 0):
                    # the gang keeps its quorum through its other subgroups, but this one binds and
                    # runs all or nothing too: a part of it left running is a partial subgroup
                    return (
                        f"gang {spec.key} subgroup {leaf} would fall below its minMember "
                        f"({n} of {need} members left)"
                    )
            return ""  # elastic above its quorum, or the victims are beyond it
        have = sum(present.values())
        return f"gang {spec.key} would fall below its quorum ({have - gone} of {have} members left)"

    def _present_counts(self, spec: GroupSpec) -> dict[str | None, int]:
        """Members per leaf that hold the gang's quorum: bound (or confirmed bound) and live, plus
        those its plan is carrying to bind (a gang half-way through its release counts whole)."""
        counts = self._present.get(spec.key)
        if counts is None:
            counts = dict(self.ledger.bound_counts(spec))
            entry = self.ledger.entry(spec.key)
            for pk, planned in entry.plan.items() if entry is not None else ():
                rec = self.store.pods.get(pk)
                if (
                    rec is not None
                    and not rec.node_name
                    and not self.ledger.is_assumed(pk)
                    and is_live(rec.obj)
                ):
                    counts[planned.leaf] = counts.get(planned.leaf, 0) + 1
            self._present[spec.key] = counts
        return counts

    def _gang_priority(self, spec: GroupSpec) -> int:
        prio = self._priority.get(spec.key)
        if prio is None:
            members = self.store.group_members(spec.key)
            prio = max((member_priority(r.obj, spec) for r in members), default=0)
            self._priority[spec.key] = prio
        return prio


class Evictions:
    """The preemptors kube-scheduler is evicting victims for, as the preempt verb answered them.

    Between the preempt verb's answer and the preemptor's bind, room is coming for the pod: its queue
    is not idle (admission), and its filter takes the general path, where a refusal of the node it is
    nominated to is answered as a retry (lagging), whatever resource the victims free and whatever
    else is reserved there, within lagging's window (which the preempt call starts afresh). That
    matters in the watch race:
    kube-scheduler retries the preemptor the moment its own cache shows a victim deleted; if this
    cache still holds the victim and the refusal were final, kube-scheduler (no terminating victim
    left on the node to wait for) would preempt a second time somewhere else, one more pod evicted
    for nothing. The victims' room is never counted free before the cache sees them go: a
    kube-scheduler whose cache lags on other pods offers the node while a victim still runs out its
    grace period there, and passed then, the node would be over-committed until the victim went.

    Entries go when the preemptor binds or is deleted, when a later preempt call replaces them, and
    beyond `max_preemptors` (oldest first), so memory stays bounded.
    """

    def __init__(self, *, max_preemptors: int = 1024) -> None:
        self.max_preemptors = max_preemptors
        self._uids: collections.OrderedDict[str, None] = collections.OrderedDict()

    def __contains__(self, preemptor_uid: str) -> bool:
        return preemptor_uid in self._uids

    def __len__(self) -> int:
        return len(self._uids)

    def record(self, store: ClusterStore, preemptor_uid: str, kept: Mapping[str, dict[str, Any]]) -> None:
        """Remember the preemptor when a candidate the verb answered (node -> MetaVictims) names a
        victim this cache holds; forget it when none does."""
        if not preemptor_uid:
            return
        by_uid = _victim_records(store, kept)
        self._uids.pop(preemptor_uid, None)
        if any(str(p.get("UID", "")) in by_uid for meta in kept.values() for p in meta.get("Pods") or ()):
            self._uids[preemptor_uid] = None
        while len(self._uids) > self.max_preemptors:
            self._uids.popitem(last=False)

    def forget(self, preemptor_uid: str) -> None:
        self._uids.pop(preemptor_uid, None)
