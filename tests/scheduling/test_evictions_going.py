"""A pod counted as going (its eviction asked, accepted, or unanswered; marked by the whole-gang
disruption) where features meet: the Lease moving with evictions queued or to be asked again, an
eviction's answer lost, a disruption's mark nobody pursues, a budget that never lets a marked pod go.
Each was found by a review of the change that counts them (1bac503) and failed on it."""

from __future__ import annotations

import asyncio

from extender.scheduling.leadership import Role
from extender.server.app import DISRUPTION
from extender.state.source import EvictionFailed, EvictionUnanswered
from tests.builders import gang_pod, make_kai_podgroup, rack_cluster
from tests.scheduling.test_api_faults_mid_work import (
    AcceptedSeenLate,
    lo_preempted_by_hi,
    replace_preemptor_pods,
)
from tests.scheduling.test_preemptor import FULL_R01, cluster, preemptor, settle, victim_gang
from tests.scheduling.test_restart_mid_work import fail_conditions_of


class Gated:
    """The Eviction API answering only when `answer()` is called, accepting and deleting at once."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.calls: list[str] = []
        self.gate = asyncio.Event()

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(name)
        await self.gate.wait()
        self.cluster.delete("", "Pod", namespace, name)
        return True


async def test_an_eviction_dropped_when_the_lease_moved_is_not_counted_as_going(make_service, monkeypatch):
    """hi preempts lo in r00: lo-0's eviction is in flight when the Lease moves, and lo-1's is
    dropped (never asked). lo-1 was counted going from the decision: a dropped write is told as
    refused, so it is no longer going, and once the Lease is back it is asked (or the preemption
    ends), never held on for as an eviction nobody asked."""
    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    ev = Gated(svc.cluster)
    svc.cluster.evict_pod = ev
    await svc.filter("hi-0")
    await settle()
    assert ev.calls == ["lo-0"]
    real_role = svc.scheduler.role
    monkeypatch.setattr(svc.scheduler, "role", lambda now: (Role.FOLLOWER, "the Lease moved"))
    ev.gate.set()
    await settle()
    await settle()
    assert ev.calls == ["lo-0"]  # lo-1's eviction dropped: never asked
    monkeypatch.setattr(svc.scheduler, "role", real_role)  # the Lease is back
    await svc.expire(0.1)
    ledger = svc.scheduler.ledger
    rec = svc.store.pods["default/lo-1"]
    going = ledger.eviction_under_way(rec.key, rec.uid)  # True: noted at the decision, never forgotten
    for _ in range(10):  # well past the preemption's hold (60 s), below EVICTED_UNSEEN_S
        await svc.expire(30.0)
        await settle()
    assert "lo-1" in ev.calls or ledger.preemption("default/hi") is None, (
        f"the preemption holds on for lo-1, whose eviction nobody asks (counted going: {going})"
    )


class Accepting:
    """The Eviction API accepting every eviction and deleting the pod at once."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.calls: list[str] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(name)
        self.cluster.delete("", "Pod", namespace, name)
        return True


def _disrupted(pod: dict) -> dict:
    pod.setdefault("status", {}).setdefault("conditions", []).append(
        {"type": "DisruptionTarget", "status": "True", "reason": "GangDisrupted", "message": "below quorum"}
    )
    return pod


async def test_a_gang_disrupted_mark_nobody_pursues_gives_no_room_forever(make_service):
    """lo (on r00) carries our GangDisrupted mark, but its PodGroup was edited to minMember 1: no
    gang, the whole-gang disruption pursues nothing, nobody asks those evictions again. hi (priority
    1000, a whole rack) must not wait on their room as if it were coming: it preempts."""
    lo = victim_gang("lo", ["n000", "n001"], 10)
    lo[0] = make_kai_podgroup("lo", min_member=1)
    lo[1:] = [_disrupted(p) for p in lo[1:]]
    svc = await make_service(cluster(lo, FULL_R01, preemptor()))
    ev = Accepting(svc.cluster)
    svc.cluster.evict_pod = ev
    for _ in range(10):
        for name in ("hi-0", "hi-1"):
            await svc.filter(name)
        await settle()
        await svc.expire(30.0)
        await settle()
    assert ev.calls, "hi waited 300 s on room of marked pods nobody evicts; it asked no eviction"


class LostAnswer(AcceptedSeenLate):
    """The Eviction API taking every eviction (shown by the watch only at `show()`), but lo-1's answer
    is lost: the client times out after the API server took the request."""

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        await super().__call__(namespace=namespace, name=name, uid=uid, reason=reason)
        if name == "lo-1":
            raise TimeoutError("no answer from the API server")
        return True


async def test_an_eviction_whose_answer_was_lost_is_not_asked_again_by_the_next_preemption(make_service):
    """hi preempts lo in r00. lo-1's eviction reaches the API server but its answer is lost (a
    timeout). hi's Job replaces its pods, which ends the preemption; the watch has not shown the
    evictions yet. lo-1 may be going (as a binding whose answer was lost may have landed): counted
    as going a while, so the new hi-0's filter evicts no second set, x and y in r01."""

    svc, ev = await lo_preempted_by_hi(make_service, LostAnswer)
    assert sorted(ev.calls) == ["lo-0", "lo-1"]
    await replace_preemptor_pods(svc)  # its Job replaces its pods: the preemption is forgotten
    await svc.filter("hi-0")
    await settle()
    assert sorted(ev.calls) == ["lo-0", "lo-1"], f"a second set of victims (or lo-1 asked twice): {ev.calls}"


class Budget:
    """A PodDisruptionBudget that never allows `refuse` to go (429 forever); others go at once."""

    def __init__(self, cluster, refuse: set[str]) -> None:
        self.cluster, self.refuse = cluster, refuse
        self.calls: list[str] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(name)
        if name in self.refuse:
            return False
        self.cluster.delete("", "Pod", namespace, name)
        return True


async def test_a_marked_pod_a_budget_never_lets_go_does_not_starve_a_preemptor_for_good(make_service):
    """lo (minMember 2) lost lo-0; the whole-gang disruption marks lo-1 (n001) GangDisrupted and asks
    its eviction every RETRY_S, a budget refusing it for good. hi (priority 1000, a whole rack) waits
    on lo-1's room one preemption hold at most, then preempts r01's x and y (priority 50), as
    kube-scheduler passes over victims a budget protects."""
    lo = victim_gang("lo", ["n000", "n001"], 10)
    lo = [lo[0], _disrupted(lo[2])]  # lo-0 gone, lo-1 marked
    svc = await make_service(cluster(lo, FULL_R01, preemptor()))
    ev = Budget(svc.cluster, {"lo-1"})
    svc.cluster.evict_pod = ev
    for _ in range(20):  # 600 s
        for name in ("hi-0", "hi-1"):
            await svc.filter(name)
        await settle()
        await svc.expire(30.0)
        await settle()
    assert "lo-1" in ev.calls  # the disruption asks it, and asks it again
    others = [c for c in ev.calls if c != "lo-1"]
    assert others, f"hi waited 600 s on lo-1's room, which a budget never lets go: {ev.calls}"


async def test_a_refused_victim_re_asked_while_following_is_asked_again_once_leading(
    make_service, monkeypatch
):
    """hi preempts lo: lo-0 goes, a budget refuses lo-1 once (429). The Lease moves before RETRY_S:
    a follower asks nothing again. The Lease comes back: lo-1 is asked again then (or the preemption
    ends), never counted as going while nobody asks it."""
    from tests.scheduling.test_api_faults_mid_work import RefusedOnce

    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    ev = RefusedOnce(svc.cluster, refuse="lo-1")
    svc.cluster.evict_pod = ev
    await svc.filter("hi-0")
    await settle()
    assert sorted(ev.calls) == ["lo-0", "lo-1"]
    real_role = svc.scheduler.role
    monkeypatch.setattr(svc.scheduler, "role", lambda now: (Role.FOLLOWER, "the Lease moved"))
    await svc.expire(15.0)  # past RETRY_S, while following
    await settle()
    monkeypatch.setattr(svc.scheduler, "role", real_role)  # the Lease is back
    for _ in range(10):  # well past the preemption's hold (60 s), below EVICTED_UNSEEN_S
        await svc.expire(30.0)
        await settle()
    ledger = svc.scheduler.ledger
    assert ev.calls.count("lo-1") >= 2 or ledger.preemption("default/hi") is None, (
        f"lo-1 never asked again, the preemption held on for it: {ev.calls}"
    )


class AlwaysUnanswered:
    """lo-1's eviction answered 500 every time (a pod two PodDisruptionBudgets cover: the Eviction API
    answers 500 for it, for good); every other eviction accepted, the pod deleted at once."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.calls: list[str] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(name)
        if name == "lo-1":
            raise EvictionUnanswered(
                "no answer to evict pod default/lo-1: 500 more than one PodDisruptionBudget"
            )
        self.cluster.delete("", "Pod", namespace, name)
        return True


async def test_an_eviction_unanswered_every_time_does_not_hold_a_preemption_on_for_ever(make_service):
    """hi preempts lo in r00: lo-0 goes, lo-1's eviction is answered 500 every time (never lands). It
    counts as going for UNCONFIRMED_S after each answer and is asked again every RETRY_S, but only
    an accepted eviction holds a preemption on past its hold: the preemption ends, hi looks again,
    and lo-1 stops counting as leaving its queue (a review found it held on for ever)."""
    svc, ev = await lo_preempted_by_hi(make_service, AlwaysUnanswered)
    ledger = svc.scheduler.ledger
    assert sorted(ev.calls) == ["lo-0", "lo-1"]
    for _ in range(40):  # 1200 s: twenty preemption holds, two EVICTED_UNSEEN_S
        await svc.expire(30.0)
        await settle()
    rec = svc.store.pods["default/lo-1"]
    assert ledger.preemption("default/hi") is None, (
        f"hi's preemption held on 1200 s for lo-1, whose eviction never lands "
        f"(asked {ev.calls.count('lo-1')} times; "
        f"counted going: {ledger.eviction_under_way(rec.key, rec.uid)}; "
        f"leaving its queue: {'default/lo-1' in ledger.victims_in_flight()})"
    )


class BudgetWhile:
    """A PodDisruptionBudget refusing the evictions of `refuse` (429) while `refusing`; every other
    eviction accepted, the pod deleted at once."""

    def __init__(self, cluster, refuse: set[str]) -> None:
        self.cluster, self.refuse, self.refusing = cluster, refuse, True
        self.calls: list[str] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(name)
        if name in self.refuse and self.refusing:
            return False
        self.cluster.delete("", "Pod", namespace, name)
        return True


def _marked_gang_on_r00(name: str) -> list[dict]:
    """Gang `name` (priority 10, minMember 2) that lost its member on n000: the one on n001 carries
    the whole-gang disruption's mark, created a while ago."""
    group, _, second = victim_gang(name, ["n000", "n001"], 10)
    second["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
    return [group, _disrupted(second)]


async def test_a_preemptor_meeting_a_new_disruption_waits_on_its_room_as_on_the_first(make_service):
    """Episode 1: lo on r00 lost lo-0, the disruption evicts lo-1 (a budget refuses it 10 s); hi
    (a whole rack) waits on lo-1's room, gets r00 and runs. Episode 2, minutes later: hi's Job
    replaces its pods, and lo2 (now on r00) is disrupted likewise, its lo2-1 marked this very
    moment. hi waits on lo2-1's room one hold, as it did on lo-1's: the wait's clock starts again
    once no marked pod is going (a review found it kept episode 1's start, and hi evicted x and y
    in r01 at once)."""
    svc = await make_service(cluster(_marked_gang_on_r00("lo"), FULL_R01, preemptor()))
    ev = svc.cluster.evict_pod = BudgetWhile(svc.cluster, {"lo-1", "lo2-1"})
    await svc.expire(1.0)
    await settle()
    assert svc.scheduler.disruption.evicting("default/lo") is not None
    for name in ("hi-0", "hi-1"):
        await svc.filter(name)
    await settle()
    assert ev.calls == ["lo-1"], ev.calls  # hi waits on lo-1's room
    ev.refusing = False  # the budget lets lo-1 go
    await svc.expire(15.0)
    await settle()
    assert svc.pod("lo-1") is None, ev.calls
    for name in ("hi-0", "hi-1"):
        node, reason = await svc.schedule(name)
        assert node in ("n000", "n001"), reason
        assert await svc.bind(name, node) == ""
    await settle()
    assert {svc.node_of("hi-0"), svc.node_of("hi-1")} == {"n000", "n001"}
    await svc.expire(300.0)  # hi runs a few minutes
    await settle()

    # episode 2: hi's pods replaced, lo2 on r00 disrupted now
    ev.refusing = True
    pods = [svc.pod(n) for n in ("hi-0", "hi-1")]
    for pod in pods:
        svc.cluster.delete("", "Pod", "default", pod["metadata"]["name"])
    await settle()
    for obj in _marked_gang_on_r00("lo2"):
        svc.cluster.apply(obj)
    for pod in pods:
        spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
        meta = {k: v for k, v in pod["metadata"].items() if k not in ("resourceVersion", "creationTimestamp")}
        svc.cluster.apply(
            {**pod, "metadata": {**meta, "uid": meta["name"] + "-again"}, "spec": spec, "status": {}}
        )
    await settle()
    await svc.expire(1.0)
    await settle()
    assert svc.scheduler.disruption.evicting("default/lo2") is not None
    before = list(ev.calls)
    for name in ("hi-0", "hi-1"):
        await svc.filter(name)
    await settle()
    second = [c for c in ev.calls[len(before) :] if c in ("x", "y")]
    assert not second, f"hi evicted {second} the moment lo2-1 was marked, waiting no hold on its room"


# ---------------------------------------------------------------- a review of the whole chain
class ShownOneByOne(AcceptedSeenLate):
    """Accepts every eviction; the watch shows each deletion only when `show_one(name)` is called."""

    def show_one(self, name: str) -> None:
        self.cluster.delete("", "Pod", "default", name)
        self._unseen = [u for u in self._unseen if u[1] != name]


async def test_an_accepted_eviction_is_not_asked_again_by_the_disruption(make_service):
    """hi preempts gang lo (lo-0, lo-1); both evictions are accepted, the watch shows only lo-0's.
    hi's Job replaces its pods (its preemption ends). lo-1's eviction was accepted: it is going.
    The whole-gang disruption, seeing lo below its quorum, must not ask lo-1's eviction again (nor
    overwrite its condition): found by a review, it never consulted the ledger's record."""
    svc, ev = await lo_preempted_by_hi(make_service, ShownOneByOne)
    assert sorted(ev.calls) == ["lo-0", "lo-1"]
    await replace_preemptor_pods(svc)
    ev.show_one("lo-0")
    await settle()
    for _ in range(8):  # past RETRY_S and the stale grace (60 s), well below EVICTED_UNSEEN_S
        await svc.expire(11.0)
        await settle()
    assert sorted(ev.calls) == ["lo-0", "lo-1"], f"an accepted eviction asked again: {ev.calls}"


# ------------------------------------------------------------------ _recorded_whole after a Job restart
class HeldBinds:
    """The embedded cluster's bind; binds of pods named in `held` wait for the gate."""

    def __init__(self, cluster, held: set[str]) -> None:
        self.real = cluster.bind_pod
        self.held = held
        self.gate = asyncio.Event()

    async def __call__(self, *, namespace: str, name: str, uid: str, node: str, persist_s: float = 0.0):
        if name in self.held:
            await self.gate.wait()
        await self.real(namespace=namespace, name=name, uid=uid, node=node)


async def test_a_restarted_jobs_gang_mid_release_is_not_evicted_for_its_old_running_status(make_service):
    """Gang x (4 pods) is bound whole: its PodGroup's status is written Running. Its Job restarts
    (every pod deleted, new pods created). The new gang is planned and released: x-0 and x-1 land,
    x-2's and x-3's binds are in flight; then x-1 is deleted. This gang was never bound whole; its
    status is still the old Running (the API server did not take the Pending of its new plan yet:
    retried in 10 s). It must not be evicted at once (the stale grace applies, as it does when the
    Pending landed): `_recorded_whole` takes the old run's status for this one's."""
    from extender.grouping import kai

    group = make_kai_podgroup("x", min_member=4)
    pods = [gang_pod(f"x-{i}", "x", cpu="8") for i in range(4)]
    svc = await make_service([*rack_cluster(racks=1, nodes_per_rack=4), group, *pods])
    ev = svc.cluster.evict_pod = Accepting(svc.cluster)
    await svc.expire(0.1)
    node, reason = await svc.schedule("x-0")
    assert node, reason
    assert await svc.bind("x-0", node) == ""
    await settle()
    await svc.expire(0.1)
    await settle()
    assert all(svc.node_of(f"x-{i}") for i in range(4))

    def status() -> dict:
        return (svc.store.get(*kai.KAI_PODGROUP, "default", "x") or {}).get("status") or {}

    assert status().get("phase") == "Running", status()

    async def unanswered(**kw) -> bool:
        return False  # the API server busy: the new gang's Pending is written again in 10 s

    svc.cluster.patch_group_status = unanswered
    for i in range(4):  # the Job restarts: its pods deleted at once, new ones created
        svc.cluster.delete("", "Pod", "default", f"x-{i}")
    await settle()
    await svc.expire(0.1)
    await settle()
    for p in pods:
        svc.cluster.apply({**p, "metadata": {**p["metadata"], "uid": p["metadata"]["name"] + "-again"}})
    await settle()
    await svc.expire(0.1)
    held = svc.cluster.bind_pod = HeldBinds(svc.cluster, {"x-2", "x-3"})
    node, reason = await svc.schedule("x-0")
    assert node, reason
    bind = asyncio.create_task(svc.bind("x-0", node))  # the release: x-0, x-1 land, x-2, x-3 wait
    await settle()
    await settle()
    assert [n for n in ("x-0", "x-1", "x-2", "x-3") if svc.node_of(n)] == ["x-0", "x-1"]
    phase = status().get("phase")
    svc.cluster.delete("", "Pod", "default", "x-1")
    await settle()
    await svc.expire(0.1)
    await settle()
    decision = svc.app[DISRUPTION].describe("default/x")["decision"]
    held.gate.set()
    await settle()
    await asyncio.wait_for(bind, 2)
    assert ev.calls == [], f"a gang being assembled evicted (status phase {phase}): {ev.calls}, {decision}"


async def test_a_failed_re_ask_does_not_forget_an_accepted_eviction(make_service):
    """As above: lo-1's eviction (hi's preemption) was accepted, the watch shows only lo-0 gone, and
    hi's preemption ended. The disruption asks lo-1 again; that ask fails before it is sent (the
    PATCH of its condition refused: the API server busy). `_evict` tells it refused, and
    `forget_evicted` drops the record of the eviction the API server accepted: lo-1 is no longer
    going, and the new hi-0's filter takes lo-1 as a victim again (asked a second time)."""
    svc, ev = await lo_preempted_by_hi(make_service, ShownOneByOne)
    ledger = svc.scheduler.ledger
    await replace_preemptor_pods(svc)
    ev.show_one("lo-0")
    await settle()
    real = svc.cluster.set_pod_condition
    fail_conditions_of(svc, "lo-1")
    rec = svc.store.pods["default/lo-1"]
    for _ in range(8):  # the disruption's ask (at once, or after the stale grace)
        await svc.expire(11.0)
        await settle()
    going = ledger.eviction_under_way(rec.key, rec.uid)
    svc.cluster.set_pod_condition = real  # the API server answers again
    await svc.filter("hi-0")
    await settle()
    assert going and ev.calls.count("lo-1") == 1, (
        f"lo-1's accepted eviction forgotten ({going=}), lo-1 a victim again: {ev.calls}"
    )


class Forbidden:
    """The Eviction API refusing `name`'s eviction for good (403: EvictionFailed), accepting and
    deleting every other pod at once."""

    def __init__(self, cluster, name: str) -> None:
        self.cluster, self.name = cluster, name
        self.calls: list[str] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(name)
        if name == self.name:
            raise EvictionFailed(f"cannot evict pod {namespace}/{name}: forbidden")
        self.cluster.delete("", "Pod", namespace, name)
        return True


async def test_a_victim_whose_eviction_is_forbidden_for_good_does_not_starve_the_preemptor(make_service):
    """hi (two whole nodes in one rack) may preempt plain pods a, b (priority 10, rack r00) or x, y
    (priority 50, rack r01). a's eviction is forbidden for good (403, a webhook's no): EvictionFailed.
    Since the change, only a 429 passes a victim over: a (and r00) is chosen again at every look,
    its preemption given up each hold, and hi never runs, though r01 is there to take."""
    from tests.scheduling.test_preemptor import FULL_R01, cluster, plain, preemptor

    svc = await make_service(cluster([plain("a", "n000", 10), plain("b", "n001", 10)], FULL_R01, preemptor()))
    ev = svc.cluster.evict_pod = Forbidden(svc.cluster, "a")
    placed = None
    for _ in range(30):  # 10 minutes of looks, 20 s apart
        node, _reason = await svc.schedule("hi-0")
        if node is not None:
            placed = node
            break
        await settle()
        await svc.expire(20.0)
        await settle()
    assert placed is not None, (
        f"hi starved: a chosen again and again ({ev.calls.count('a')} asks): {ev.calls[-6:]}"
    )
