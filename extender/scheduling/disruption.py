"""Whole-gang disruption: which running gangs to evict whole, and why.

A gang is all or nothing while it runs too. Three rules, decided over the store (and the ledger, to
leave a gang being bound alone):
- disruption-all: a member of a group whose disruption mode is ALL (JobSet `disruptionMode: {all: {}}`)
  was preempted, evicted, deleted or is gone while others run: the others are evicted at once;
- below-quorum: a gang (minMember) that was bound whole loses members to a disruption and is left
  below its quorum: the rest are evicted (an elastic gang still at its quorum is not broken);
- stale: a gang that was bound whole stays below its quorum (members failed or went) for longer than
  the grace period: the rest are evicted.

The incident is read from the pods (deletionTimestamp, a DisruptionTarget condition, and pods seen
deleted), so a restarted service finishes an eviction a previous one began: a member already evicted
carries our DisruptionTarget condition or a deletionTimestamp and is not asked again. Only the
survivors of an incident are evicted, never the gang's replacements (created after its members went):
the members bound when the disruption was seen, or, for an incident older than this process, the
members created before it. Held in memory besides: evictions in flight (retried after RETRY_S, as a
PodDisruptionBudget answering 429 asks), members seen deleted, and how long a gang has been below quorum.
A preemption's or a reclaim's victims (the ledger's record) are that eviction's: their going is no
disruption of their gang, and none of them is asked to go a second time. Nor are members whose owners
(a Job, a JobSet, up their owner references) are all gone or being deleted in the foreground: the
garbage collector takes them all, and evicting them one by one would only race it with writes.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
import time
from collections.abc import Callable
from typing import Any

from extender.grouping import kai
from extender.grouping.membership import WORKLOAD_KINDS
from extender.grouping.owners import MAX_OWNER_DEPTH
from extender.model.group import Disruption, GroupSpec, MembershipState, Source
from extender.model.keys import GroupKey, PodKey, api_group, pod_key
from extender.model.timestamps import parse_time_s
from extender.scheduling.decisions import Effect, pod_ref
from extender.scheduling.ledger import GangLedger
from extender.scheduling.status import RUNNING
from extender.state.store import (
    GANG_DISRUPTED,
    POD,
    ClusterStore,
    PodRecord,
    disruption_condition,
    is_live,
    is_terminal,
)

DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTED_BY_GANG = "PreemptionByGangScheduler"
OUR_REASONS = frozenset({GANG_DISRUPTED, PREEMPTED_BY_GANG})
RETRY_S = 10.0
"""An eviction asked for and not yet seen in the cache is not asked again before this."""
GONE_KEEP_S = 600.0
"""How long (wall clock) a member seen deleted counts as an incident of its gang."""
_GONE_PER_GANG = 256
_OWNERS_GONE_KEPT = 4096
"""Owners seen deleted that are remembered (by uid) at most: a hint, so a bound loses only writes."""


class Why(enum.Enum):
    DISRUPTION_ALL = "disruption-all"
    BELOW_QUORUM = "below-quorum"
    STALE = "stale"


@dataclasses.dataclass(frozen=True)
class Victim:
    pod: PodKey
    uid: str


@dataclasses.dataclass(frozen=True)
class GangEviction:
    """Evict `pods` of `spec`'s gang, for `why`; `fresh` is False when it repeats an incident in
    progress (an eviction retried), so an incident is counted once."""

    spec: GroupSpec
    why: Why
    reason: str
    pods: tuple[Victim, ...]
    fresh: bool

    @property
    def gang(self) -> GroupKey:
        return self.spec.key

    def effects(self) -> list[Effect]:
        return [
            Effect(
                "evict",
                *pod_ref(v.pod),
                {
                    "uid": v.uid,
                    "reason": self.reason,
                    "gang": str(self.gang),
                    "conditionReason": GANG_DISRUPTED,
                },
            )
            for v in self.pods
        ]


@dataclasses.dataclass(frozen=True)
class _Signal:
    """A member disrupted at `at_s` (wall clock, seconds), in words: "was preempted"; `own`: by this
    service's own eviction (the incident's end, not a new incident)."""

    pod: PodKey
    at_s: float
    how: str
    own: bool = False


@dataclasses.dataclass
class _View:
    spec: GroupSpec
    running: list[PodRecord]  # bound, live
    signals: list[_Signal]
    healthy: dict[str | None, int]  # per leaf: running and not disrupted, or finished (Succeeded)
    ever_bound: dict[str | None, int]  # per leaf: every member known to have been bound


def _deleted_at(meta: dict[str, Any]) -> float | None:
    """When the deletion was asked for: the API server sets deletionTimestamp that many seconds of grace
    ahead, and the controllers replace the pod at once, so the timestamp itself would take the
    replacements for survivors."""
    at = parse_time_s(meta.get("deletionTimestamp"))
    if at is None:
        return None
    grace = meta.get("deletionGracePeriodSeconds")
    return at - grace if isinstance(grace, int) and not isinstance(grace, bool) and grace > 0 else at


def _how(pod: dict[str, Any]) -> str:
    cond = disruption_condition(pod)
    reason = str((cond or {}).get("reason") or "")
    if "Preemption" in reason:
        return "preempted"
    if cond is not None:
        return "evicted"
    return "deleted"


class GangDisruption:
    """Decides whole-gang evictions; the server runs `decide()` from its tick and carries them out."""

    def __init__(
        self,
        store: ClusterStore,
        ledger: GangLedger | None = None,
        *,
        stale_grace_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.stale_grace_s = stale_grace_s
        self.clock = clock
        self.wall_clock = wall_clock
        self._dirty: set[GroupKey] = set()
        self._scanned = False
        self._terminal: dict[GroupKey, dict[PodKey, dict[str, Any]]] = {}
        self._gone: dict[GroupKey, collections.deque[tuple[_Signal, str | None]]] = {}
        self._whole: set[GroupKey] = set()
        self._below_since: dict[GroupKey, float] = {}
        self._sent: dict[str, float] = {}  # pod uid -> when its eviction was asked for
        self._counted: dict[GroupKey, float] = {}  # gang -> its incident last reported as fresh
        self._survivors: dict[GroupKey, set[str]] = {}
        """gang -> uids of the members bound and live when a disruption of one of them was first seen:
        exactly the survivors (its replacements cannot be bound yet). Timestamps, whole seconds, cannot
        tell a survivor from a replacement created in the same second; they serve after a restart."""
        self._signalled: set[str] = set()  # uids whose disruption was seen (the survivors noted once)
        self._bound_since: set[GroupKey] = set()  # gangs with a member bound since their survivors' walk
        self._evicting: set[str] = set()
        """uids this process asked to evict, until seen deleted: their going is this incident's end, not
        a new one (on 1.26+ the Eviction API replaces our DisruptionTarget reason with its own)."""
        self.decisions: dict[GroupKey, str] = {}
        """The newest decision per gang, in words, for explain."""
        self._owners_gone: dict[str, float] = {}
        """uid -> when (wall clock) an object that may own pods was seen deleted: its pods go with it
        (the garbage collector deletes them), so evicting them first would only add writes. After a
        restart an owner deleted before is simply absent, and its gang is treated as before."""
        store.add_listener(self._on_change)

    # ----------------------------------------------------------------- watching
    def _on_change(self, event: str, kind: tuple[str, str], obj: dict[str, Any]) -> None:
        if kind != POD and event == "DELETED" and kind[1] != "Node":
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            if uid:
                if len(self._owners_gone) >= _OWNERS_GONE_KEPT:
                    del self._owners_gone[next(iter(self._owners_gone))]  # the oldest
                self._owners_gone[uid] = self.wall_clock()
            return
        if kind != POD or self.store.is_plain(obj):
            return  # a group of one is never a gang nor disruption-all: no membership derived
        meta = obj.get("metadata") or {}
        pk = pod_key(str(meta.get("namespace", "")), str(meta.get("name", "")))
        m = self.store.membership_of(obj)
        if m.state is not MembershipState.MEMBER or m.group is None or not _watched(m.group):
            return
        key = m.group.key
        self._dirty.add(key)
        bound = bool((obj.get("spec") or {}).get("nodeName"))
        uid = str(meta.get("uid") or "")
        disrupted = event == "DELETED" or meta.get("deletionTimestamp") or disruption_condition(obj)
        ours = uid in self._evicting or _ours(obj) or self._preemptor_of(pk) is not None
        if bound and not is_terminal(obj) and disrupted and uid not in self._signalled:
            self._signalled.add(uid)
            if not ours and self._scanned and (key not in self._survivors or key in self._bound_since):
                # in the initial list, replacements may be in the store already. Walked at a signal
                # only when a member was bound since the last walk: a gang's members deleted one by
                # one (its owner's deletion) cost one walk, not one each. A member whose binding is
                # on its way lands a survivor: a release in flight when a preemption took the others
                # would leave it bound alone
                self._bound_since.discard(key)
                self._survivors.setdefault(key, set()).update(
                    r.uid
                    for r in self.store.group_members(key)
                    if r.uid != uid and is_live(r.obj) and (r.node_name or self._on_its_way(r.key))
                )
            elif not ours and key in self._survivors:
                # no member bound since: those whose binding set out since land survivors all the same
                self._survivors[key].update(self._setting_out(key) - {uid})
        elif bound and not disrupted and key in self._survivors and uid not in self._survivors[key]:
            self._bound_since.add(key)  # a member bound since the survivors were noted
        if event == "DELETED":
            self._signalled.discard(uid)
            self._evicting.discard(uid)
            self._terminal.get(key, {}).pop(pk, None)
            if bound and not is_terminal(obj):
                at = _deleted_at(meta) or self.wall_clock()
                gone = self._gone.setdefault(key, collections.deque(maxlen=_GONE_PER_GANG))
                how = _how(obj) if disruption_condition(obj) else "deleted"
                gone.append((_Signal(pk, at, how, own=ours), m.subgroup))
        elif is_terminal(obj) and bound:
            self._terminal.setdefault(key, {})[pk] = obj

    def _scan(self) -> None:
        """Once, after the cache is synced: every gang is looked at (a restart finishes the job)."""
        self._scanned = True
        for rec in self.store.grouped_pods():
            m = self.store.membership(rec)
            if m.state is MembershipState.MEMBER and m.group is not None and _watched(m.group):
                self._dirty.add(m.group.key)
                if is_terminal(rec.obj) and rec.node_name:
                    self._terminal.setdefault(m.group.key, {})[rec.key] = rec.obj
                meta = rec.obj.get("metadata") or {}
                if meta.get("deletionTimestamp") or disruption_condition(rec.obj):
                    # disrupted before this process: its survivors are told by timestamps alone
                    self._signalled.add(rec.uid)

    # ----------------------------------------------------------------- deciding
    def decide(self) -> list[GangEviction]:
        """The gangs to evict now. Cheap when no member changed and no gang is below quorum."""
        if not self._scanned:
            self._scan()
        now = self.clock()
        self._sent = {uid: t for uid, t in self._sent.items() if now - t < RETRY_S}
        self._prune_owners_gone()
        keys = self._dirty | set(self._below_since) | self._retrying()
        self._dirty = set()
        out = []
        for key in sorted(keys):
            found = self._decide_one(key, now)
            if found is not None:
                out.append(found)
        return out

    def evicting(self, key: GroupKey) -> str | None:
        """Why the gang's members are being evicted whole, while that is under way; else None. A member
        placed now would be bound beside members about to go: a partial gang."""
        decision = self.decisions.get(key)
        return decision if decision is not None and decision.startswith("evicting") else None

    def _retrying(self) -> set[GroupKey]:
        """Gangs whose incident is open (members still to evict once the retry delay is over)."""
        return {k for k, d in self.decisions.items() if d.startswith("evicting")}

    def _view(self, key: GroupKey) -> _View | None:
        members = self.store.group_members(key)
        terminal = list(self._terminal.get(key, {}).values())
        spec = None
        if members:
            spec = self.store.membership(members[0]).group
        elif terminal:
            spec = self.store.membership_of(terminal[0]).group
        if spec is None or not _watched(spec):
            return None
        wall = self.wall_clock()
        gone = self._gone.get(key)
        while gone and wall - gone[0][0].at_s > GONE_KEEP_S:
            gone.popleft()
        signals: list[_Signal] = [s for s, _ in gone or ()]
        running: list[PodRecord] = []
        healthy: dict[str | None, int] = {}
        ever: dict[str | None, int] = {}
        for _, leaf in gone or ():
            ever[leaf] = ever.get(leaf, 0) + 1
        for rec in members:
            if not rec.node_name:
                continue
            leaf = self.store.membership(rec).subgroup
            ever[leaf] = ever.get(leaf, 0) + 1
            meta = rec.obj.get("metadata") or {}
            cond = disruption_condition(rec.obj)
            if meta.get("deletionTimestamp") or cond is not None:
                at = _deleted_at(meta) or parse_time_s((cond or {}).get("lastTransitionTime"))
                own = rec.uid in self._evicting or _ours(rec.obj) or self._preemptor_of(rec.key) is not None
                signals.append(_Signal(rec.key, at if at is not None else wall, _how(rec.obj), own=own))
            if is_live(rec.obj):
                running.append(rec)
                if cond is None:
                    healthy[leaf] = healthy.get(leaf, 0) + 1
        for obj in terminal:
            if (obj.get("status") or {}).get("phase") != "Succeeded":  # those are counted below
                leaf = self.store.membership_of(obj).subgroup
                ever[leaf] = ever.get(leaf, 0) + 1
        # members that ran to completion, also once the pod garbage collector deleted them (their
        # Jobs keep the count): a finishing gang is not stale
        for leaf, n in self.store.finished_counts(spec).items():
            healthy[leaf] = healthy.get(leaf, 0) + n
            ever[leaf] = ever.get(leaf, 0) + n
        # this service's own evictions are an incident's end; alone (a restart after the member that
        # started it is gone) they are all there is to go on
        foreign = [sig for sig in signals if not sig.own]
        return _View(spec, running, foreign or signals, healthy, ever)

    def _decide_one(self, key: GroupKey, now: float) -> GangEviction | None:
        view = self._view(key)
        if view is None or not view.running:
            if view is None or not self._landing(key):
                self._forget(key)  # a binding still in flight lands a survivor of the incident
            return None
        spec = view.spec
        # a preemption's or a reclaim's victims are that eviction's: their gang goes whole with it, and
        # is neither disrupted by it nor asked to go a second time
        preempted = {r.key: gang for r in view.running if (gang := self._preemptor_of(r.key)) is not None}
        if preempted and len(preempted) == len(view.running):
            self._below_since.pop(key, None)
            for_gang = next(iter(preempted.values()))
            self.decisions[key] = f"being evicted whole for gang {for_gang} (a preemption or a reclaim)"
            return None
        evictable = [r for r in view.running if _evictable(r) and r.key not in preempted]
        below = spec.ready_leaves(view.healthy) is None
        if not below:
            self._whole.add(key)
            self._below_since.pop(key, None)
            if not view.signals or spec.disruption is not Disruption.ALL:
                # an eviction found below (asked for, or retried) says so in its place: an incident
                # still open keeps the gang among those retried
                self.decisions[key] = "healthy: at its quorum"
                return self._broken_subgroup(view, evictable, now)
        # a member still running with our own condition was judged (by this process or one before
        # it) bound whole and below its quorum: that eviction is finished, whoever began it. The
        # group's own status, written when its quorum was bound, says so after a restart too (the
        # members gone, and a survivor's mark never written: it would run alone for good)
        whole = (
            key in self._whole
            or spec.ready_leaves(view.ever_bound) is not None
            or any(_ours(r.obj) for r in view.running)
            or self._recorded_whole(spec)
        )
        candidates = evictable
        if view.signals and (spec.disruption is Disruption.ALL or (below and whole)):
            last = max(reversed(view.signals), key=lambda s: s.at_s)  # a tie: the newest seen
            survivors = self._survivors.get(key)
            if survivors is not None:  # seen as it happened: exactly who was bound then
                targets = [r for r in candidates if r.uid in survivors]
            else:  # before this process (a restart): members created before the incident's second
                targets = [r for r in candidates if _created_s(r) < math.floor(last.at_s)]
            if targets:
                if spec.disruption is Disruption.ALL:
                    why = Why.DISRUPTION_ALL
                    reason = (
                        f"gang {key}: member {last.pod} {_was(last.how)}; "
                        "disruptionMode all evicts the whole gang"
                    )
                else:
                    why = Why.BELOW_QUORUM
                    reason = (
                        f"gang {key}: member {last.pod} {_was(last.how)}, leaving {_total(view.healthy)} of "
                        f"the {spec.quorum_upper_bound()} pods its quorum needs; a gang below its quorum is "
                        "evicted whole"
                    )
                return self._evict(spec, why, reason, targets, now, incident=last.at_s)
        if not below:
            self.decisions[key] = "healthy: at its quorum"
            return None
        return self._stale(view, whole, candidates, now)

    def _recorded_whole(self, spec: GroupSpec) -> bool:
        """Whether the gang's group object records that its quorum was bound (status.py writes it):
        a KAI PodGroup's phase Running, a scheduling.k8s.io PodGroup's Scheduled condition. Read
        only where this process knows nothing newer of the gang (after a restart): one it is
        planning or binding may be its workload's new pods, under a status of the old ones."""
        if self.ledger is not None and self.ledger.entry(spec.key) is not None:
            return False
        if spec.source is Source.KAI_PODGROUP or spec.source is Source.KAI_DERIVED:
            obj = self.store.get(*kai.KAI_PODGROUP, spec.namespace, spec.name) or {}
            return (obj.get("status") or {}).get("phase") == RUNNING
        if spec.source is Source.K8S_PODGROUP:
            obj = self.store.get("scheduling.k8s.io", "PodGroup", spec.namespace, spec.name) or {}
            return any(
                isinstance(c, dict)
                and c.get("type") in ("PodGroupScheduled", "PodGroupInitiallyScheduled")
                and c.get("status") == "True"
                for c in (obj.get("status") or {}).get("conditions") or ()
            )
        return False

    def _broken_subgroup(self, view: _View, candidates: list[PodRecord], now: float) -> GangEviction | None:
        """A gang still at its quorum through its other subgroups, one of whose subgroups, bound whole,
        a disruption left below its minMember: that subgroup's survivors are evicted, since a
        subgroup binds and runs all or nothing too (the preempt verb takes one below its minMember
        only when every candidate node breaks a gang)."""
        spec = view.spec
        if not view.signals or not spec.subgroups:
            return None
        last = max(reversed(view.signals), key=lambda s: s.at_s)
        survivors = self._survivors.get(spec.key)
        for leaf, ever in sorted(view.ever_bound.items(), key=lambda kv: str(kv[0])):
            need = spec.leaf_quorum(leaf)
            have = view.healthy.get(leaf, 0)
            if leaf is None or not 0 < have < need <= ever:
                continue
            # members deleted with their owner are the garbage collector's: a leaf of only those is
            # no incident of ours, and the next broken leaf is looked at
            in_leaf = [r for r in candidates if self.store.membership(r).subgroup == leaf]
            if survivors is not None:
                targets = [r for r in in_leaf if r.uid in survivors]
            else:
                targets = [r for r in in_leaf if _created_s(r) < math.floor(last.at_s)]
            targets = [r for r in targets if self._owner_going(r.obj) is None]
            if targets:
                reason = (
                    f"gang {spec.key}: member {last.pod} {_was(last.how)}, leaving {have} of the {need} pods "
                    f"subgroup {leaf} needs; a subgroup below its minMember is evicted whole"
                )
                return self._send(spec, Why.BELOW_QUORUM, reason, targets, now, incident=last.at_s)
        return None

    def _stale(
        self, view: _View, whole: bool, candidates: list[PodRecord], now: float
    ) -> GangEviction | None:
        key = view.spec.key
        have, need = _total(view.healthy), view.spec.quorum_upper_bound()
        if not whole or self._gang_planned(key):
            self._below_since.pop(key, None)
            self.decisions[key] = f"below quorum ({have} of {need}) but never bound whole: left alone"
            return None
        since = self._below_since.setdefault(key, now)
        if self.stale_grace_s <= 0:
            self.decisions[key] = f"below quorum ({have} of {need}); stale-gang eviction is off"
            return None
        below_s = now - since
        if below_s < self.stale_grace_s:
            self.decisions[key] = (
                f"below quorum ({have} of {need}) for {below_s:.0f}s; evicted whole after "
                f"{self.stale_grace_s:g}s"
            )
            return None
        reason = (
            f"gang {key}: {have} of the {need} pods its quorum needs running for {below_s:.0f}s, longer than "
            f"--stale-gang-grace-s ({self.stale_grace_s:g}s); the stale gang is evicted whole"
        )
        return self._evict(view.spec, Why.STALE, reason, candidates, now, incident=-since)

    def _owner_going(self, obj: dict[str, Any], depth: int = 0) -> str | None:
        """Why the garbage collector is deleting `obj` with its owners, in words: every one of its
        owners is gone (seen deleted, or replaced by an object of another uid) or being deleted in the
        foreground (which deletes its dependents first), directly or through its own owners; a
        workload kind the store lists and does not hold counts as gone. None when one of them stays,
        or cannot be read (an owner of another kind the store does not hold): a background
        deletion held by another finalizer deletes nothing until it ends, nor does an orphaning one."""
        refs = [r for r in (obj.get("metadata") or {}).get("ownerReferences") or () if isinstance(r, dict)]
        if not refs or depth >= MAX_OWNER_DEPTH:
            return None
        namespace = (obj.get("metadata") or {}).get("namespace")
        first = None
        for ref in refs:
            kind, name, uid = str(ref.get("kind", "")), str(ref.get("name", "")), str(ref.get("uid") or "")
            what = f"{kind} {namespace}/{name}"
            group = api_group(str(ref.get("apiVersion", "")))
            if uid and uid in self._owners_gone:
                why = f"{what} (deleted)"
            else:
                owner = self.store.get(group, kind, namespace, name)
                meta = (owner or {}).get("metadata") or {}
                if owner is None and (group, kind) in WORKLOAD_KINDS and self.store.lists(group, kind):
                    # a kind this cache lists, absent from it: deleted before this process saw it go
                    # (a restart in the garbage collector's work); its pods go with it
                    why = f"{what} (gone)"
                elif owner is None:
                    return None
                elif uid and meta.get("uid") and meta.get("uid") != uid:
                    why = f"{what} (deleted, and another object made under its name)"
                elif meta.get("deletionTimestamp") and "foregroundDeletion" in (meta.get("finalizers") or ()):
                    why = f"{what} (being deleted)"
                elif meta.get("deletionTimestamp"):
                    return None  # held (another finalizer) or orphaning: it deletes nothing below it yet
                else:
                    why = self._owner_going(owner, depth + 1)
                    if why is None:
                        return None
            first = first or why
        return first

    def _prune_owners_gone(self) -> None:
        wall = self.wall_clock()
        while self._owners_gone:
            uid, at = next(iter(self._owners_gone.items()))
            if wall - at <= GONE_KEEP_S:
                return
            del self._owners_gone[uid]

    def _preemptor_of(self, pod: PodKey) -> GroupKey | None:
        """The gang this service is evicting the pod for (a preemption or a reclaim): the ledger's."""
        return self.ledger.victim_of(pod) if self.ledger is not None else None

    def _gang_planned(self, key: GroupKey) -> bool:
        """Whether the ledger holds a plan for the gang, or part of one being released or bound."""
        entry = self.ledger.entry(key) if self.ledger is not None else None
        return entry is not None and bool(entry.plan or entry.releasing or entry.arrived)

    def _on_its_way(self, pod: PodKey) -> bool:
        return self.ledger is not None and self.ledger.being_bound(pod)

    def _releasing(self, key: GroupKey) -> bool:
        return self.ledger is not None and self.ledger.releasing_any(key)

    def _setting_out(self, key: GroupKey) -> set[str]:
        """uids of the gang's members whose binding is on its way, from the ledger's own (few) sets:
        single binds in flight, the gang's release, bindings confirmed and not yet seen."""
        if self.ledger is None:
            return set()
        out = set()
        for pk in self.ledger.on_their_way(key):
            rec = self.store.pods.get(pk)
            if rec is None or not is_live(rec.obj):
                continue
            m = self.store.membership(rec)
            if m.state is MembershipState.MEMBER and m.group is not None and m.group.key == key:
                out.add(rec.uid)
        return out

    def _landing(self, key: GroupKey) -> bool:
        """A binding of the gang on its way: its release's, or a member's own (one beyond its quorum,
        or held back by the start-up fence). O(bindings on their way), never a walk of the gang."""
        return self._releasing(key) or bool(self._setting_out(key))

    def _evict(
        self,
        spec: GroupSpec,
        why: Why,
        reason: str,
        targets: list[PodRecord],
        now: float,
        *,
        incident: float,
    ) -> GangEviction | None:
        # deleted with their owner (a JobSet or a Job deleted outright): the garbage collector takes
        # them, and evicting each would only race it with writes
        with_owner = {r.key: owner for r in targets if (owner := self._owner_going(r.obj)) is not None}
        if with_owner:
            targets = [r for r in targets if r.key not in with_owner]
            if not targets:
                owner = next(iter(with_owner.values()))
                self.decisions[spec.key] = f"being deleted with its owner {owner}: nothing to evict"
                return None
        return self._send(spec, why, reason, targets, now, incident=incident)

    def _send(
        self,
        spec: GroupSpec,
        why: Why,
        reason: str,
        targets: list[PodRecord],
        now: float,
        *,
        incident: float,
    ) -> GangEviction | None:
        """Evicts `targets`, none of them going with its owner; each is asked once until retried. One
        whose eviction the API server already accepted (the watch has not shown it yet) is going:
        never asked again."""
        due = [r for r in targets if r.uid not in self._sent and not self._accepted(r)]
        self.decisions[spec.key] = f"evicting {len(targets)} member(s) ({why.value}): {reason}"
        if not due:
            return None
        # counted once: not again when retried, nor by a restarted service that finds its own marks
        fresh = self._counted.get(spec.key) != incident and not any(_ours(r.obj) for r in targets)
        self._counted[spec.key] = incident
        for r in due:
            self._sent[r.uid] = now
            self._evicting.add(r.uid)
        return GangEviction(spec, why, reason, tuple(Victim(r.key, r.uid) for r in due), fresh)

    def _accepted(self, rec: PodRecord) -> bool:
        return self.ledger is not None and self.ledger.eviction_accepted(rec.key, rec.uid)

    def _forget(self, key: GroupKey) -> None:
        """No member runs: the incident (if any) is over."""
        self._whole.discard(key)
        self._counted.pop(key, None)
        self._gone.pop(key, None)
        self._survivors.pop(key, None)
        self._bound_since.discard(key)
        self._below_since.pop(key, None)
        self.decisions.pop(key, None)
        if not self.store.group_members(key):
            self._terminal.pop(key, None)

    # ----------------------------------------------------------------- explain
    def describe(self, key: GroupKey) -> dict[str, Any]:
        """What explain shows: the grace period, how long the gang has been below quorum, the decision."""
        since = self._below_since.get(key)
        return {
            "staleGraceS": self.stale_grace_s,
            "belowQuorumForS": round(self.clock() - since, 1) if since is not None else None,
            "decision": self.decisions.get(key, ""),
        }


def _watched(spec: GroupSpec) -> bool:
    return spec.disruption is Disruption.ALL or spec.is_gang()


def _evictable(rec: PodRecord) -> bool:
    """Running and not already marked for disruption by someone else (kube-scheduler deletes those)."""
    cond = disruption_condition(rec.obj)
    return cond is None or cond.get("reason") in OUR_REASONS


def _ours(pod: dict[str, Any]) -> bool:
    cond = disruption_condition(pod)
    return cond is not None and cond.get("reason") in OUR_REASONS


def _created_s(rec: PodRecord) -> float:
    """When the pod was created (wall clock); +inf when unknown: never taken for a survivor."""
    found = parse_time_s((rec.obj.get("metadata") or {}).get("creationTimestamp"))
    return found if found is not None else float("inf")


def _was(how: str) -> str:
    return {"preempted": "was preempted", "evicted": "was evicted"}.get(how, "was deleted")


def _total(counts: dict[str | None, int]) -> int:
    return sum(counts.values())
