"""Reclaim and holds over the queue book with changes in flight: every ancestor's quota kept, victims
leaving counted once, a preemptor's hold lasting while its victims terminate, a fair-share hold
only for a holder that could use the room, and a malformed Queue failing closed.

Driven as test_queues.py drives the scheduler: directly, over an embedded cluster; evictions are
effects the test carries out (or not) itself.
"""

from __future__ import annotations

import pytest

from extender.scheduling.decisions import Verdict
from extender.scheduling.queues import QueueSnapshot, read_tree, reclaimable
from tests.builders import make_pod
from tests.scheduling.test_preemptor import FULL_R01, Evictions, cluster, preemptor, settle, victim_gang
from tests.scheduling.test_queues import UNSCHEDULABLE, World, gpu_nodes, kai_queue

GPU = "nvidia.com/gpu"
DELETING = "2026-01-01T00:00:00Z"


def evicted(decision) -> list[str]:
    return sorted(e.name for e in decision.effects if e.kind == "evict")


def terminating(w: World, name: str) -> None:
    """The eviction reached the API server: the pod is terminating (its grace period), still bound."""
    pod = w.pod(name)
    w.cluster.apply({**pod, "metadata": {**pod["metadata"], "deletionTimestamp": DELETING}})


def queue_use(w: World, queue: str) -> int:
    """GPUs the queue's pods hold that are not on their way out."""
    snap = w.scheduler.queue_snapshot()
    return snap.allocated[queue][GPU] - snap.leaving[queue][GPU]


# ================================================================= 2: every ancestor's quota
def depts(b_gangs: list[int]) -> World:
    """dept-a / team-a and dept-b / team-b (quota 0 itself: only its parent guarantees anything), four
    8-gpu nodes; team-b runs one gang per entry of `b_gangs`, of that many 8-gpu pods."""
    w = World(
        [
            *gpu_nodes(4),
            kai_queue("dept-a", gpu={"quota": 16, "limit": -1}),
            kai_queue("team-a", "dept-a", gpu={"quota": 16, "limit": -1}),
            kai_queue("dept-b", gpu={"quota": 16, "limit": -1}),
            kai_queue("team-b", "dept-b", gpu={"quota": 0, "limit": -1}),
        ]
    )
    for i, size in enumerate(b_gangs):
        members = w.gang(f"b{i}", size, "team-b", gpu="8")
        w.schedule(*members)
        assert w.bound(*members)
    return w


def test_a_reclaim_never_takes_an_ancestor_of_the_victims_queue_below_its_quota() -> None:
    # team-b's one gang of 24 gpus is the only victim; team-b's own quota is 0, but evicting it would
    # take dept-b from 24 to 0, below its quota of 16
    w = depts([3])
    decision = w.filter(w.gang("a", 2, "team-a", gpu="8")[0])
    assert evicted(decision) == []
    assert decision.verdict is Verdict.NO_FIT
    assert w.scheduler.ledger.preemption("default/a") is None


def test_a_reclaim_that_keeps_every_ancestor_at_its_quota_goes_ahead() -> None:
    # three gangs of 8: one of them is enough (8 free + 8 freed), and dept-b stays at 16
    w = depts([1, 1, 1])
    decision = w.filter(w.gang("a", 2, "team-a", gpu="8")[0])
    assert decision.verdict is Verdict.WAITING
    assert len(evicted(decision)) == 1
    assert queue_use(w, "dept-b") == 16


def test_a_reclaim_between_siblings_nets_out_in_their_shared_parent() -> None:
    # team-b2, below its fair share inside dept-b, reclaims from its sibling over its own: dept-b loses
    # what team-b2 takes back, so it stays at its quota once the reclaim is done
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("dept-b", gpu={"quota": 16, "limit": -1}),
            kai_queue("team-b1", "dept-b", gpu={"quota": 0, "limit": -1}),
            kai_queue("team-b2", "dept-b", gpu={"quota": 8, "limit": -1}),
        ]
    )
    for name in ("b1", "b2"):
        w.schedule(*w.gang(name, 1, "team-b1", gpu="8"))
    decision = w.filter(w.gang("c", 2, "team-b2", gpu="4")[0])
    assert len(evicted(decision)) == 1, decision.reason


# ================================================================= 3: victims leaving, counted once
@pytest.mark.parametrize("victims_terminating", [False, True], ids=["eviction-not-seen-yet", "terminating"])
def test_a_second_reclaim_counts_the_first_ones_victims_as_leaving(victims_terminating: bool) -> None:
    w = World(
        [
            *gpu_nodes(4),
            kai_queue("team-a", gpu={"quota": 16, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 16, "limit": -1}),
        ]
    )
    for i in range(4):
        members = w.gang(f"b{i}", 1, "team-b", gpu="8")
        w.schedule(*members)
        assert w.bound(*members)
    first = w.filter(w.gang("a1", 2, "team-a", gpu="8")[0])
    assert len(evicted(first)) == 2  # team-b from 32 to 16: its quota
    if victims_terminating:
        for name in evicted(first):
            terminating(w, name)
    second = w.filter(w.gang("a2", 2, "team-a", gpu="8")[0])
    assert evicted(second) == [], "team-b would fall to 0, below its quota of 16"
    assert queue_use(w, "team-b") == 16
    assert w.scheduler.ledger.preemption("default/a2") is None


# ================================================================= 5: the hold while victims terminate
async def test_the_preemption_hold_lasts_while_its_victims_are_still_terminating(make_service) -> None:
    # lo's pods take longer than the 60 s hold to terminate (an ordinary grace period): the room stays
    # the preemptor's, and it never evicts x and y (untouched) as well
    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    evict = Evictions()
    svc.cluster.evict_pod = evict
    await svc.filter("hi-0")
    await settle()
    assert sorted(pk for pk, _, _ in evict.calls) == ["default/lo-0", "default/lo-1"]
    for name in ("lo-0", "lo-1"):
        pod = svc.pod(name)
        svc.cluster.apply({**pod, "metadata": {**pod["metadata"], "deletionTimestamp": DELETING}})
    await svc.expire(61.0)
    assert svc.scheduler.ledger.preemption("default/hi") is not None
    assert svc.scheduler.gang_preemption.outcomes["expired"] == 0
    described = (await (await svc.client.get("/debug/gangs/default/hi")).json())["preemption"]
    assert [(v["pod"], v["gone"], v["terminating"]) for v in described["victims"]] == [
        ("default/lo-0", False, True),
        ("default/lo-1", False, True),
    ]
    doc = await svc.filter("hi-0")
    await settle()
    assert sorted(pk for pk, _, _ in evict.calls) == ["default/lo-0", "default/lo-1"], "nobody else"
    assert next(iter(doc["FailedAndUnresolvableNodes"].values())).endswith("waiting for them to go")
    deadline = svc.scheduler.ledger.next_deadline()
    assert deadline is None or deadline > svc.clock.now, "no deadline in the past: the ticker would spin"
    # the victims go, late: the room is held for the preemptor from then on, and it is planned there
    for name in ("lo-0", "lo-1"):
        svc.cluster.delete("", "Pod", "default", name)
    await svc.expire(30.0)
    assert svc.scheduler.ledger.victims_gone("default/hi")
    node, reason = await svc.schedule("hi-0")
    assert node in ("n000", "n001"), reason
    svc.check_invariants()


async def test_a_victim_whose_eviction_never_started_ends_the_hold_on_time(make_service) -> None:
    # the eviction was refused (a PodDisruptionBudget): the victim is not terminating, so the hold ends
    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    svc.cluster.evict_pod = Evictions()
    await svc.filter("hi-0")
    await settle()
    await svc.expire(61.0)
    assert svc.scheduler.ledger.preemption("default/hi") is None
    assert svc.scheduler.gang_preemption.outcomes["expired"] == 1


# ================================================================= 6: a holder that cannot use the room
def test_a_fair_share_hold_does_not_wait_for_a_holder_that_can_neither_fit_nor_reclaim() -> None:
    # team-b's gang (8 gpus, within its share) fits nowhere with 4 gpus free, and cannot reclaim:
    # team-a's one gang of 12 is all it runs and team-a's quota is 8. team-a's small gang, over its
    # share, must not wait for it
    w = World(
        [
            *gpu_nodes(4, gpus=4),
            kai_queue("team-a", gpu={"quota": 8, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 8, "limit": -1}),
        ]
    )
    big = w.gang("a1", 3, "team-a", gpu="4")
    w.schedule(*big)
    assert w.bound(*big)
    small = w.gang("a2", 2, "team-a", gpu="1")
    holder = w.gang("h", 2, "team-b", gpu="4")
    for name in holder:
        w.cluster.apply({**w.pod(name), "status": {"conditions": [UNSCHEDULABLE]}})
    first = w.filter(small[0])
    assert first.verdict is Verdict.WAITING and "fair share" in first.reason  # h has not been tried yet
    assert w.filter(holder[0]).verdict is Verdict.NO_FIT  # tried: it fits nowhere, reclaims nothing
    assert [(e.kind, e.name) for e in w.scheduler.admission.holds_over()] == [("nudge", "a2-0")]
    w.schedule(*small)
    assert w.bound(*small)


# ================================================================= 8: a malformed parent fails closed
@pytest.mark.parametrize(
    ("org_resources", "says"),
    [
        pytest.param(
            {"cpu": {"quota": 4000, "limit": 2000}, "gpu": {"quota": 8, "limit": 8}},
            "queue org: gpu limit 8, in use 8, gang needs 8",
            id="cpu limit below quota: its valid gpu limit still holds",
        ),
        pytest.param(
            {"gpu": {"quota": 8, "limit": "lots"}},
            "queue org: gpu limit 0",
            id="unreadable gpu limit: no gpu admitted",
        ),
    ],
)
def test_a_malformed_parent_queue_keeps_holding_its_children(org_resources: dict, says: str) -> None:
    w = World(
        [
            *gpu_nodes(4),
            kai_queue("org", **org_resources),
            kai_queue("team-a", "org", gpu={"quota": 8, "limit": -1}),
        ]
    )
    first = w.gang("first", 8, "team-a")
    decisions = w.schedule(*first)
    if "limit 0" in says:
        reason = decisions[first[0]].reason
        assert not w.bound(first[0])
    else:
        assert w.bound(*first)
        reason = w.filter(w.gang("second", 8, "team-a")[0]).reason
    assert says in reason
    assert "queue org is malformed: spec.resources." in reason  # and says why
    (org,) = [q for q in w.scheduler.describe_queues()["queues"] if q["queue"] == "org"]
    assert org["error"].startswith("spec.resources.") and org["resources"]["gpu"]["limit"] is not None
    assert [q["parent"] for q in w.scheduler.describe_queues()["queues"] if q["queue"] == "team-a"] == ["org"]


def test_a_queue_in_a_parent_cycle_keeps_its_limits_over_its_children() -> None:
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("x", "y", gpu={"quota": 0, "limit": 2}),
            kai_queue("y", "x", gpu={"quota": 0, "limit": 2}),
            kai_queue("team", "x", gpu={"quota": 0, "limit": -1}),
        ]
    )
    reason = w.filter(w.gang("g", 4, "team")[0]).reason
    assert "gpu limit 2" in reason and "cycle" in reason


def test_a_malformed_leaf_queue_still_takes_nothing_and_says_why() -> None:
    w = World([*gpu_nodes(1), kai_queue("team", gpu={"quota": 4, "limit": 2})])
    w.cluster.apply(make_pod("p", gpu="1", labels={"kai.scheduler/queue": "team"}))
    decision = w.filter("p")
    assert decision.verdict is Verdict.WAITING
    assert "queue team cannot be used: spec.resources.gpu.limit" in decision.reason


# ================================================================= reclaimable, the pure rule
def snapshot(use: dict[str, tuple[int, int, int]]) -> QueueSnapshot:
    """org (quota 16) over team-x (quota 0) and team-y (quota 4); other (quota -1) over team-z
    (quota 0); team-r, the reclaimer's, alone. `use`: queue -> (allocated, leaving, fair share) in
    gpus, descendants included."""
    tree = read_tree(
        [
            kai_queue("org", gpu={"quota": 16, "limit": -1}),
            kai_queue("team-x", "org", gpu={"quota": 0, "limit": -1}),
            kai_queue("team-y", "org", gpu={"quota": 4, "limit": -1}),
            kai_queue("other", gpu={"quota": -1, "limit": -1}),
            kai_queue("team-z", "other", gpu={"quota": 0, "limit": -1}),
            kai_queue("team-r", gpu={"quota": 8, "limit": -1}),
        ]
    )
    zero = {name: (0, 0, 0) for name in tree.queues}

    def column(i: int) -> dict[str, dict[str, int]]:
        return {q: {"cpu": 0, "memory": 0, GPU: v[i]} for q, v in {**zero, **use}.items()}

    return QueueSnapshot(
        tree=tree,
        allocated=column(0),
        requested=column(0),
        fair_share=column(2),
        capacity={GPU: 64},
        free={GPU: 0},
        unknown={},
        leaving=column(1),
    )


@pytest.mark.parametrize(
    ("use", "reclaimer", "need", "freed", "ok"),
    [
        pytest.param(
            {"org": (24, 0, 16), "team-x": (24, 0, 8)},
            "team-r",
            8,
            {"team-x": 8},
            True,
            id="org stays at its quota",
        ),
        pytest.param(
            {"org": (24, 0, 16), "team-x": (24, 0, 8)},
            "team-r",
            16,
            {"team-x": 16},
            False,
            id="the leaf has room above its quota, its parent does not",
        ),
        pytest.param(
            {"org": (24, 8, 16), "team-x": (24, 8, 8)},
            "team-r",
            8,
            {"team-x": 8},
            False,
            id="what is leaving already is not taken again",
        ),
        pytest.param(
            {"org": (16, 0, 16), "team-x": (16, 0, 8)},
            "team-y",
            8,
            {"team-x": 8},
            True,
            id="a sibling's reclaim nets out in the parent they share",
        ),
        pytest.param(
            {"org": (16, 0, 16), "team-x": (16, 0, 8)},
            "team-y",
            4,
            {"team-x": 8},
            False,
            id="the shared parent loses what the gang does not make up",
        ),
        pytest.param(
            {"org": (24, 0, 16), "team-x": (12, 0, 8), "team-y": (12, 0, 8)},
            "team-r",
            16,
            {"team-x": 4, "team-y": 4},
            True,
            id="two victim queues together keep their parent at its quota",
        ),
        pytest.param(
            {"org": (24, 0, 16), "team-x": (12, 0, 4), "team-y": (12, 0, 4)},
            "team-r",
            16,
            {"team-x": 8, "team-y": 4},
            False,
            id="two victim queues together take their parent below its quota",
        ),
        pytest.param(
            {"other": (8, 0, 0), "team-z": (8, 0, 0)},
            "team-r",
            8,
            {"team-z": 8},
            False,
            id="an ancestor with an unlimited quota is never reclaimed from",
        ),
        pytest.param(
            {"org": (40, 8, 16), "team-x": (24, 8, 16)},
            "team-r",
            8,
            {"team-x": 8},
            False,
            id="over its fair share only before what is leaving goes",
        ),
    ],
)
def test_reclaimable(
    use: dict[str, tuple[int, int, int]], reclaimer: str, need: int, freed: dict[str, int], ok: bool
) -> None:
    freed_by_queue = {q: {GPU: n} for q, n in freed.items()}
    assert reclaimable(snapshot(use), reclaimer, {GPU: need}, freed_by_queue) is ok


def test_a_queue_whose_reclaim_is_under_way_counts_that_gang_as_arriving() -> None:
    # team-a's fair share is 16: a1's reclaim (16) takes it there once a1 lands, so a2 (16 more) is not
    # within its share and may not reclaim from team-c as well, though team-c is over its own
    w = World(
        [
            *gpu_nodes(4),
            kai_queue("team-a", gpu={"quota": 16, "limit": -1, "overQuotaWeight": 0}),
            kai_queue("team-b", gpu={"quota": 0, "limit": -1}),
            kai_queue("team-c", gpu={"quota": 0, "limit": -1}),
        ]
    )
    for queue in ("b", "c"):
        for i in range(2):
            w.schedule(*w.gang(f"{queue}{i}", 1, f"team-{queue}", gpu="8"))
    a1, a2 = w.gang("a1", 2, "team-a", gpu="8"), w.gang("a2", 2, "team-a", gpu="8")
    assert w.scheduler.queue_snapshot().fair_share["team-a"][GPU] == 16
    assert len(evicted(w.filter(a1[0]))) == 2
    assert evicted(w.filter(a2[0])) == [], "team-a would end at 32, over its fair share of 16"
    snap = w.scheduler.queue_snapshot()
    assert snap.arriving["team-a"][GPU] == 16


async def test_the_hold_of_a_preemptor_deleted_meanwhile_ends_on_time(make_service) -> None:
    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    svc.cluster.evict_pod = Evictions()
    await svc.filter("hi-0")
    await settle()
    for name in ("lo-0", "lo-1"):
        pod = svc.pod(name)
        svc.cluster.apply({**pod, "metadata": {**pod["metadata"], "deletionTimestamp": DELETING}})
    for name in ("hi-0", "hi-1"):
        svc.cluster.delete("", "Pod", "default", name)
    await svc.expire(61.0)
    assert svc.scheduler.ledger.preemption("default/hi") is None
