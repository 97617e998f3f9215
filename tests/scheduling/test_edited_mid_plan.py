"""Group objects and members edited in place while plans, holds, preemptions, queue admission or
releases are in progress: a member's queue label, a PodGroup's queue, minMember, subgroups,
minSubGroup, topology constraint, a Job's min-member annotation, a preemptor's pods moved to
another PodGroup. Each edit leaves no partial gang, no queue past its limit, no room held for
nobody, and no second set of victims."""

from __future__ import annotations

import asyncio
import copy

from extender.model.labels import QUEUE
from tests.builders import gang_pod, make_kai_podgroup, rack_cluster
from tests.scheduling.test_queues import kai_queue


def podgroup_without_queue(name: str, **kw) -> dict:
    pg = make_kai_podgroup(name, **kw)
    del pg["spec"]["queue"]
    return pg


def queue_alloc_cpu(svc, queue: str) -> int:
    snap = svc.scheduler.admission.queue_snapshot()
    return snap.allocated[queue]["cpu"]


async def test_a_members_queue_label_edited_mid_plan_is_not_bound_past_the_new_queues_limit(make_service):
    objs = [
        *rack_cluster(),
        kai_queue("q1", cpu={"quota": -1, "limit": -1}),
        kai_queue("q2", cpu={"quota": 1000, "limit": 1000}),
        podgroup_without_queue("a", min_member=2),
        gang_pod("a-0", "a", cpu="2", labels={QUEUE: "q1"}),
        gang_pod("a-1", "a", cpu="2", labels={QUEUE: "q1"}),
    ]
    svc = await make_service(objs, gang_release_on_first_bind=False)
    nodes = {}
    for n in ("a-0", "a-1"):
        node, reason = await svc.schedule(n)
        assert node, reason
        nodes[n] = node
    # the operator moves one member to q2 (cpu limit 1000m) while the plan is held
    moved = copy.deepcopy(svc.pod("a-1"))
    moved["metadata"]["labels"][QUEUE] = "q2"
    svc.cluster.apply(moved)
    errors = await asyncio.gather(*(svc.bind(n, nodes[n]) for n in nodes))
    svc.check_invariants()
    # q2's cpu limit is 1 core (1000m): a member of 2 cores may not be bound in it
    assert queue_alloc_cpu(svc, "q2") <= 1000, (errors, queue_alloc_cpu(svc, "q2"))


async def test_a_podgroups_queue_edited_while_it_holds_is_not_admitted_with_its_old_queues_hold(make_service):
    """The hold's room is charged to the queue it was made for (q1); admission in the new queue (q2)
    credits it back all the same (queue_wait), so q2 admits a gang its limit refuses."""
    from tests.builders import make_pod

    q1 = {QUEUE: "q1"}
    objs = [
        *rack_cluster(racks=1, nodes_per_rack=3, cpu="4"),
        kai_queue("q1", cpu={"quota": -1, "limit": -1}),
        kai_queue("q2", cpu={"quota": -1, "limit": 4000}),
        make_pod("q2-run", cpu="2", labels={QUEUE: "q2"}, node="n002"),
        make_pod("blk-0", cpu="3", labels=q1, node="n000"),
        make_pod("blk-1", cpu="3", labels=q1, node="n001"),
        make_pod("blk-2", cpu="2", labels=q1, node="n002"),
        make_kai_podgroup("a", min_member=2, queue="q1"),
        gang_pod("a-0", "a", cpu="2"),
        gang_pod("a-1", "a", cpu="2"),
    ]
    svc = await make_service(objs)
    node, reason = await svc.schedule("a-0")
    assert node is None, reason
    await svc.expire(0.1)  # the holding pass: a holds room, charged to q1
    held = svc.scheduler.ledger.holds.of("default/a")
    assert held is not None and held.queue == "q1", svc.scheduler.ledger.holds.why_none("default/a")
    # the operator moves the gang to q2, which runs 2 of its 4 cores: a's 4 cores do not fit its limit
    pg = copy.deepcopy(svc.cluster.get("scheduling.run.ai", "PodGroup", "default", "a"))
    pg["spec"]["queue"] = "q2"
    svc.cluster.apply(pg)
    svc.cluster.delete("", "Pod", "default", "blk-0")
    svc.cluster.delete("", "Pod", "default", "blk-1")
    # kube-scheduler retries the parked members on the deletions, before the service's next tick
    doc = await svc.filter("a-0")
    plan = svc.plan("default/a")
    # q2 runs 2 of its 4 cores: a plan of 4 more may not be admitted there (its room is q2's allocated)
    assert queue_alloc_cpu(svc, "q2") <= 4000, (doc, plan, queue_alloc_cpu(svc, "q2"))
    assert not plan, (doc, plan)


async def test_a_137_podgroup_members_queue_label_edited_mid_plan_is_not_bound_past_the_limit(make_service):
    """The same on a 1.37 scheduling.k8s.io PodGroup (no queue of its own: its members' labels name it),
    with the plan released at the first member's bind (the default)."""
    from tests.builders import make_pod

    pg = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    pods = [make_pod(f"train-{i}", cpu="2", scheduling_group="train", labels={QUEUE: "q1"}) for i in range(2)]
    objs = [
        *rack_cluster(),
        kai_queue("q1", cpu={"quota": -1, "limit": -1}),
        kai_queue("q2", cpu={"quota": 1000, "limit": 1000}),
        pg,
        *pods,
    ]
    svc = await make_service(objs)
    node, reason = await svc.schedule("train-0")
    assert node, reason
    moved = copy.deepcopy(svc.pod("train-1"))
    moved["metadata"]["labels"][QUEUE] = "q2"
    svc.cluster.apply(moved)
    error = await svc.bind("train-0", node)  # released at the first member's bind: both are bound
    svc.check_invariants()
    assert queue_alloc_cpu(svc, "q2") <= 1000, (error, svc.node_of("train-1"), queue_alloc_cpu(svc, "q2"))


# ------------------------------------------------------------------ an edit while a plan is held
def edit_pg(svc, name: str, fn) -> None:
    pg = copy.deepcopy(svc.cluster.get("scheduling.run.ai", "PodGroup", "default", name))
    fn(pg["spec"])
    svc.cluster.apply(pg)


async def plan_two(svc, names=("a-0", "a-1")) -> dict[str, str]:
    nodes = {}
    for n in names:
        node, reason = await svc.schedule(n)
        assert node, reason
        nodes[n] = node
    return nodes


async def test_min_member_raised_mid_plan_binds_nothing(make_service):
    objs = [*rack_cluster(), make_kai_podgroup("a", min_member=2)]
    objs += [gang_pod(f"a-{i}", "a", cpu="2") for i in range(3)]
    svc = await make_service(objs)
    nodes = await plan_two(svc)
    edit_pg(svc, "a", lambda s: s.update(minMember=3))
    errors = await asyncio.gather(*(svc.bind(n, nodes[n]) for n in nodes))
    assert all(errors) and not svc.node_of("a-0") and not svc.node_of("a-1")
    svc.check_invariants()


async def test_rack_constraint_added_mid_plan_is_not_released_across_racks(make_service):
    from extender.sim.cluster import topology

    objs = [*rack_cluster(nodes_per_rack=2), topology("dc"), make_kai_podgroup("a", min_member=3)]
    objs += [gang_pod(f"a-{i}", "a", cpu="8") for i in range(3)]  # one per node: must span racks
    svc = await make_service(objs)
    node, reason = await svc.schedule("a-0")
    assert node, reason
    edit_pg(
        svc, "a", lambda s: s.update(topologyConstraint={"topology": "dc", "requiredTopologyLevel": "rack"})
    )
    error = await svc.bind("a-0", node)
    assert error and not any(svc.node_of(f"a-{i}") for i in range(3)), error
    svc.check_invariants()


async def test_podgroup_queue_moved_to_a_full_queue_mid_plan_binds_nothing(make_service):
    objs = [
        *rack_cluster(),
        kai_queue("q1", cpu={"quota": -1, "limit": -1}),
        kai_queue("q2", cpu={"quota": 1000, "limit": 1000}),
        make_kai_podgroup("a", min_member=2, queue="q1"),
        gang_pod("a-0", "a", cpu="2"),
        gang_pod("a-1", "a", cpu="2"),
    ]
    svc = await make_service(objs)
    node, reason = await svc.schedule("a-0")
    assert node, reason
    edit_pg(svc, "a", lambda s: s.update(queue="q2"))
    error = await svc.bind("a-0", node)
    assert error and queue_alloc_cpu(svc, "q2") == 0, error
    svc.check_invariants()


async def test_every_members_queue_label_moved_mid_plan_binds_nothing(make_service):
    objs = [
        *rack_cluster(),
        kai_queue("q1", cpu={"quota": -1, "limit": -1}),
        kai_queue("q2", cpu={"quota": 1000, "limit": 1000}),
        podgroup_without_queue("a", min_member=2),
        gang_pod("a-0", "a", cpu="2", labels={QUEUE: "q1"}),
        gang_pod("a-1", "a", cpu="2", labels={QUEUE: "q1"}),
    ]
    svc = await make_service(objs)
    node, reason = await svc.schedule("a-0")
    assert node, reason
    for n in ("a-0", "a-1"):
        moved = copy.deepcopy(svc.pod(n))
        moved["metadata"]["labels"][QUEUE] = "q2"
        svc.cluster.apply(moved)
    error = await svc.bind("a-0", node)
    assert error and queue_alloc_cpu(svc, "q2") == 0, error
    svc.check_invariants()


async def two_subgroups(make_service, *, y_min: int):
    """PodGroup t: subgroup x (minMember 2) with t-0 and t-1, subgroup y (minMember `y_min`) with t-2."""
    leaf = "kai.scheduler/subgroup-name"
    pg = make_kai_podgroup("t", subgroups=[{"name": "x", "minMember": 2}, {"name": "y", "minMember": y_min}])
    objs = [*rack_cluster(), pg]
    objs += [gang_pod(f"t-{i}", "t", cpu="2", labels={leaf: lf}) for i, lf in enumerate("xxy")]
    return await make_service(objs)


async def test_subgroup_renamed_mid_plan_binds_nothing(make_service):
    svc = await two_subgroups(make_service, y_min=1)
    node, reason = await svc.schedule("t-0")
    assert node, reason
    edit_pg(
        svc, "t", lambda s: s.update(subGroups=[{"name": "x", "minMember": 2}, {"name": "z", "minMember": 1}])
    )
    error = await svc.bind("t-0", node)
    assert error and not any(svc.node_of(f"t-{i}") for i in range(3)), error
    assert svc.store.reservations == {}
    svc.check_invariants()


async def test_min_sub_group_lowered_mid_plan_replans(make_service):
    svc = await two_subgroups(make_service, y_min=2)
    doc = await svc.filter("t-0")
    assert not doc["NodeNames"]  # y short of pods
    edit_pg(svc, "t", lambda s: s.update(minSubGroup=1))
    node, reason = await svc.schedule("t-0")
    assert node, reason
    assert set(svc.plan("default/t")) == {"default/t-0", "default/t-1"}
    assert await svc.bind("t-0", node) == ""
    svc.check_invariants()


async def test_job_min_member_annotation_raised_mid_plan_binds_nothing(make_service):
    from tests.builders import make_job, make_pod

    train = make_job("train", parallelism=3, min_member=2)
    pods = [make_pod(f"train-{i}", owner=train, cpu="2") for i in range(3)]
    svc = await make_service([*rack_cluster(), train, *pods])
    node, reason = await svc.schedule("train-0")
    assert node, reason
    job = copy.deepcopy(svc.cluster.get("batch", "Job", "default", "train"))
    job["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = "3"
    svc.cluster.apply(job)
    error = await svc.bind("train-0", node)
    assert error and not any(svc.node_of(f"train-{i}") for i in range(3)), error
    svc.check_invariants()


# ------------------------------------------------------------------ a preemptor regrouped mid-preemption
async def test_a_preemptors_members_moved_to_another_podgroup_give_the_held_room_back(make_service):
    """hi preempted lo and holds rack r00 for itself; the operator moves hi's pods to PodGroup hi2 (same
    spec). Nobody is left in hi: its held room must go back at once (as when hi's pods are deleted),
    and hi2 must not evict a second set of victims while r00 stands empty, held for nobody."""
    from tests.scheduling.test_preemptor import FULL_R01, cluster, preemptor, settle, victim_gang

    hi2 = preemptor("hi2")[0]  # the PodGroup alone
    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor(), [hi2]))
    await svc.filter("hi-0")
    await settle()  # the embedded cluster evicts (deletes) lo-0 and lo-1
    assert svc.scheduler.ledger.victims_gone("default/hi") and svc.store.reservations
    for n in ("hi-0", "hi-1"):
        moved = copy.deepcopy(svc.pod(n))
        moved["metadata"]["annotations"]["pod-group-name"] = "hi2"
        svc.cluster.apply(moved)
    await settle()
    await svc.expire(0.0)
    held = svc.scheduler.ledger.preemption("default/hi")
    doc = await svc.filter("hi-0")  # now hi2's member
    await settle()
    alive = {n: svc.pod(n) is not None for n in ("x", "y")}
    assert held is None, "rack r00's room is still held for gang hi, which has no member left"
    assert all(alive.values()), f"a second set of victims was evicted: {alive}"
    assert doc["NodeNames"] and set(svc.plan("default/hi2")) == {"default/hi-0", "default/hi-1"}, doc


# ------------------------------------------------------------------ a rack group of a quorum of one
async def test_a_rack_groups_members_filtered_before_either_bound_never_bind_in_two_racks(make_service):
    """A KAI PodGroup of minMember 1 (its quorum lowered to one, or made so) with a required rack:
    no gang, but its members share a rack all the same. Two filtered before either bound each pass
    every rack; their binds, decided one after the other, may not land in two racks (interleavings
    kill seed 542, after minMember 2 -> 1: the second bind was never checked against the first)."""
    from extender.sim.cluster import topology

    rack = {"topology": "dc", "requiredTopologyLevel": "rack"}
    objs = [*rack_cluster(), topology("dc"), make_kai_podgroup("a", min_member=1, topology=rack)]
    objs += [gang_pod(f"a-{i}", "a", cpu="2") for i in range(2)]
    svc = await make_service(objs)
    for name in ("a-0", "a-1"):
        doc = await svc.filter(name)
        assert {"n000", "n010"} <= set(doc["NodeNames"]), doc  # nothing placed yet: every rack
    errors = await asyncio.gather(svc.bind("a-0", "n000"), svc.bind("a-1", "n010"))
    assert errors[0] == "", errors
    assert "outside the topology domain" in errors[1], errors
    assert svc.node_of("a-0") == "n000" and svc.node_of("a-1") is None
    assert await svc.bind("a-1", "n001") == ""
    svc.check_invariants()


async def test_a_pod_is_not_bound_to_a_node_tainted_since_its_filter(make_service):
    """A pod filtered onto a node that is tainted NoSchedule before its bind (a bind the start-up
    fence held back re-decides on the cache as it is then: interleavings seed 2709, a group whose
    quorum was lowered to one meanwhile): the bind is refused, saying why, and the pod goes elsewhere."""
    from tests.builders import make_pod

    svc = await make_service([*rack_cluster(), make_pod("p", cpu="2")])
    doc = await svc.filter("p")
    assert "n000" in doc["NodeNames"], doc
    node = copy.deepcopy(svc.cluster.get("", "Node", None, "n000"))
    node["spec"]["taints"] = [{"key": "dedicated", "value": "other-team", "effect": "NoSchedule"}]
    svc.cluster.apply(node)
    error = await svc.bind("p", "n000")
    assert error == "pod default/p: node n000 no longer admits it (its labels or taints changed)", error
    assert svc.node_of("p") is None
    assert await svc.bind("p", "n001") == ""  # kube-scheduler's next cycle: a node that admits it
    svc.check_invariants()
