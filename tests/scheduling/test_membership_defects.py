"""Issue 21's membership defects, driven through the real HTTP service on a fake clock: a pod that
changes gang, a foreign pod naming a workload's derived PodGroup, and finished members' quorum.
Each test ends with the invariants (no over-commit, no partial gang, no leaked hold)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from extender.gang.entry import Phase
from tests.builders import controller_ref, gang_pod, make_job, make_kai_podgroup, make_pod, rack_cluster


def job_pod(name: str, owner: dict, **kw) -> dict:
    return make_pod(name, owner=owner, cpu="2", **kw)


# -------------------------------------------------------------- 10: a planned pod changes gang
async def test_a_planned_pod_that_changes_gang_leaves_its_old_plan(make_service):
    objs = [
        *rack_cluster(),
        make_kai_podgroup("a", min_member=2),
        make_kai_podgroup("b", min_member=2),
        gang_pod("a-0", "a", cpu="2"),
        gang_pod("a-1", "a", cpu="2"),
        gang_pod("b-0", "b", cpu="2"),
    ]
    svc = await make_service(objs, gang_release_on_first_bind=False)
    node, reason = await svc.schedule("a-0")
    assert node, reason
    assert set(svc.plan("default/a")) == {"default/a-0", "default/a-1"}
    waiting = asyncio.create_task(svc.bind("a-0", node))
    await asyncio.sleep(0.05)
    moved = copy.deepcopy(svc.pod("a-1"))
    moved["metadata"]["annotations"]["pod-group-name"] = "b"
    svc.cluster.apply(moved)
    # the event took it out of a's plan, and a's plan with it (its quorum counted on a-1)
    assert "default/a-1" not in svc.plan("default/a")
    assert svc.scheduler.ledger.gang_of("default/a-1") is None
    assert "default/a-1" not in svc.store.reservations
    assert "left the gang's plan (it is now default/b)" in await asyncio.wait_for(waiting, 1)
    # a-1 now plans with b; a waits for a second member again
    doc = await svc.filter("a-1")
    assert doc["NodeNames"], doc
    assert set(svc.plan("default/b")) == {"default/a-1", "default/b-0"}
    nodes = {"a-1": doc["NodeNames"][0], "b-0": svc.plan("default/b")["default/b-0"]}
    assert await asyncio.gather(*(svc.bind(n, nodes[n]) for n in nodes)) == ["", ""]
    assert svc.phase("default/b") is Phase.BOUND
    assert svc.node_of("a-0") is None
    doc = await svc.filter("a-0")
    assert doc["NodeNames"] == [] and "1 exist, 2 needed" in next(iter(doc["FailedNodes"].values()))
    svc.check_invariants()


async def test_a_planned_pod_whose_gang_changes_before_it_reaches_bind_is_not_released(make_service):
    """The fast path must not pass the old plan's node once the change is cached, nor bind release it."""
    objs = [
        *rack_cluster(),
        make_kai_podgroup("a", min_member=2),
        make_kai_podgroup("b", min_member=2),
        gang_pod("a-0", "a", cpu="2"),
        gang_pod("a-1", "a", cpu="2"),
        gang_pod("b-0", "b", cpu="2"),
    ]
    svc = await make_service(objs)
    planned = {}
    for n in ("a-0", "a-1"):
        node, reason = await svc.schedule(n)
        assert node, reason
        planned[n] = node
    moved = copy.deepcopy(svc.pod("a-1"))
    moved["metadata"]["annotations"]["pod-group-name"] = "b"
    svc.cluster.apply(moved)
    errors = await asyncio.gather(*(svc.bind(n, planned[n]) for n in planned))
    assert all(errors), errors  # neither binds: a has one member, b has not planned a-1
    assert svc.node_of("a-0") is None and svc.node_of("a-1") is None
    svc.check_invariants()


# -------------------------------------------------------------- 12: a foreign pod and a derived PodGroup
async def test_a_foreign_pod_naming_a_jobs_podgroup_does_not_make_up_its_quorum(make_service):
    train = make_job("train", parallelism=2, min_member=2)
    objs = [*rack_cluster(), train, job_pod("train-0", train)]
    svc = await make_service(objs)
    await svc.expire(0.1)  # the podgrouper's tick creates the PodGroup it keeps for the Job
    pg = svc.cluster.get("scheduling.run.ai", "PodGroup", "default", "pg-train-train-uid")
    assert pg is not None
    svc.cluster.apply(make_pod("intruder", cpu="2", annotations={"pod-group-name": "pg-train-train-uid"}))
    doc = await svc.filter("intruder")
    assert doc["NodeNames"] == []
    reason = next(iter({**doc["FailedNodes"], **doc["FailedAndUnresolvableNodes"]}.values()))
    assert "is the one derived for Job default/train" in reason
    doc = await svc.filter("train-0")
    assert doc["NodeNames"] == [] and "1 exist, 2 needed" in next(iter(doc["FailedNodes"].values()))
    assert svc.plan("default/pg-train-train-uid") == {}
    svc.check_invariants()


# -------------------------------------------------------------- 13: finished members count for quorum
def succeeded(pod: dict, node: str) -> dict:
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    out["status"] = {"phase": "Succeeded"}
    return out


async def test_a_retried_pod_of_a_job_whose_other_members_succeeded_is_placed(make_service):
    train = make_job("train", parallelism=4, min_member=4)
    done = [succeeded(job_pod(f"train-{i}", train), f"n00{i}") for i in range(3)]
    failed = succeeded(job_pod("train-3", train), "n003")
    failed["status"]["phase"] = "Failed"
    train["status"] = {"succeeded": 3, "failed": 1}
    retry = job_pod("train-3-retry", train)
    svc = await make_service([*rack_cluster(), train, *done, failed, retry])
    node, reason = await svc.schedule("train-3-retry")
    assert node, reason
    assert await svc.bind("train-3-retry", node) == ""
    assert svc.phase("default/pg-train-train-uid") is Phase.BOUND
    svc.check_invariants()


async def test_finished_members_the_pod_gc_deleted_count_through_the_jobs_status(make_service):
    train = make_job("train", parallelism=4, min_member=4)
    train["status"] = {"succeeded": 3, "failed": 1}
    retry = job_pod("train-3-retry", train)
    svc = await make_service([*rack_cluster(), train, retry])  # the finished pods are gone
    node, reason = await svc.schedule("train-3-retry")
    assert node, reason
    assert await svc.bind("train-3-retry", node) == ""
    svc.check_invariants()


async def test_a_job_with_too_few_pods_still_waits_for_its_quorum(make_service):
    """Only members that succeeded count: failed ones do not make up the quorum."""
    train = make_job("train", parallelism=4, min_member=4)
    train["status"] = {"succeeded": 1, "failed": 2}
    svc = await make_service([*rack_cluster(), train, job_pod("train-a", train), job_pod("train-b", train)])
    doc = await svc.filter("train-a")
    assert doc["NodeNames"] == []
    assert "2 exist and 1 finished, 4 needed for quorum" in next(iter(doc["FailedNodes"].values()))


async def test_a_plan_whose_podgroup_is_deleted_is_dropped(make_service):
    """Every member's gang changed at once (they wait for a PodGroup again): nothing of it may bind."""
    objs = [*rack_cluster(), make_kai_podgroup("a", min_member=2)]
    objs += [gang_pod("a-0", "a", cpu="2"), gang_pod("a-1", "a", cpu="2")]
    svc = await make_service(objs)
    node, reason = await svc.schedule("a-0")
    assert node, reason
    svc.cluster.delete("scheduling.run.ai", "PodGroup", "default", "a")
    assert svc.plan("default/a") == {} and svc.store.reservations == {}
    assert "waiting for PodGroup default/a to exist" in await svc.bind("a-0", node)
    assert svc.node_of("a-0") is None and svc.node_of("a-1") is None
    svc.check_invariants()


async def test_a_planned_member_whose_subgroup_changes_drops_the_plan(make_service):
    """Same gang, another leaf: the plan counted it toward its old subgroup's minMember."""
    pg = make_kai_podgroup("t", subgroups=[{"name": "x", "minMember": 2}, {"name": "y", "minMember": 1}])
    leaf = "kai.scheduler/subgroup-name"
    objs = [*rack_cluster(), pg]
    objs += [gang_pod(f"t-{i}", "t", cpu="2", labels={leaf: lf}) for i, lf in enumerate("xxy")]
    svc = await make_service(objs)
    node, reason = await svc.schedule("t-0")
    assert node, reason
    assert len(svc.plan("default/t")) == 3
    moved = copy.deepcopy(svc.pod("t-1"))
    moved["metadata"]["labels"][leaf] = "y"
    svc.cluster.apply(moved)
    assert svc.plan("default/t") == {} and svc.store.reservations == {}
    doc = await svc.filter("t-0")  # x has one pod now: the gang waits
    assert doc["NodeNames"] == []
    svc.check_invariants()


async def test_a_plan_holds_only_the_members_its_quorum_lacks_beside_the_finished_ones(make_service):
    # 2 of the Job's 4 succeeded (their pods gone); 3 retries pending: the quorum lacks 2, which is
    # what admission counts; a plan of 3 would hold room its queue never admitted (interleavings seed
    # 268: every bind refused for the queue's limit, replanned, refused again)
    train = make_job("train", parallelism=4, min_member=4)
    train["status"] = {"succeeded": 2}
    retries = [job_pod(f"train-r{i}", train) for i in range(3)]
    svc = await make_service([*rack_cluster(), train, *retries])
    node, reason = await svc.schedule("train-r0")
    assert node, reason
    plan = svc.plan("default/pg-train-train-uid")
    assert len(plan) == 2 and "default/train-r0" in plan
    (other,) = [pk.split("/")[1] for pk in plan if pk != "default/train-r0"]
    other_node, _ = await svc.schedule(other)
    errors = await asyncio.gather(svc.bind("train-r0", node), svc.bind(other, other_node))
    assert errors == ["", ""]
    assert svc.phase("default/pg-train-train-uid") is Phase.BOUND
    svc.check_invariants()


# -------------------------------------------- a quorum lowered in place; KAI's PodGroup, its Job unseen
def podgrouper_job(parallelism: int, min_member: int) -> tuple[dict, list[dict], dict]:
    """A Job, its pods and the PodGroup KAI's podgrouper made for it (pg-<name>-<uid>, owned by it,
    named by each pod), whose minMember `min_member` may say otherwise than the Job's annotation."""
    j = make_job("train", parallelism=parallelism, min_member=3, uid="u-train")
    pg = make_kai_podgroup("pg-train-u-train", min_member=min_member)
    pg["metadata"]["ownerReferences"] = [controller_ref(j)]
    pods = [
        job_pod(f"train-{i}", j, annotations={"pod-group-name": "pg-train-u-train"})
        for i in range(parallelism)
    ]
    return j, pods, pg


def nudged(svc, *names: str) -> dict[str, bool]:
    return {n: "gang-extender.io/nudge" in (svc.pod(n)["metadata"].get("annotations") or {}) for n in names}


async def test_members_turned_away_short_of_a_quorum_lowered_in_place_are_nudged(make_service):
    """A PodGroup's minMember lowered from 3 to 2 with its 2 members turned away for want of a third:
    the members there now make the quorum, and no pod arrives to say so. They are nudged (found by
    review: the wait for pods was judged by the quorum of its start, and they sat parked until
    kube-scheduler's own flush)."""
    objs = [*rack_cluster(), make_kai_podgroup("g", min_member=3), gang_pod("g-0", "g"), gang_pod("g-1", "g")]
    svc = await make_service(objs)
    for n in ("g-0", "g-1"):
        doc = await svc.filter(n)
        assert doc["NodeNames"] == [] and "2 exist, 3 needed" in next(iter(doc["FailedNodes"].values()))
    assert nudged(svc, "g-0", "g-1") == {"g-0": False, "g-1": False}
    svc.cluster.apply(make_kai_podgroup("g", min_member=2))
    await svc.expire(0.5)
    assert nudged(svc, "g-0", "g-1") == {"g-0": True, "g-1": True}
    node, why = await svc.schedule("g-0")
    assert node, why


@pytest.mark.parametrize("pg_min", [1, 4], ids=["a PodGroup looser than the Job", "a PodGroup stricter"])
async def test_pods_naming_the_podgroup_made_for_their_unseen_job_wait_for_the_job(make_service, pg_min):
    """KAI's podgrouper's PodGroup for a Job names a quorum the service derives from the Job itself
    once it sees it, under the same key. While the Job is unseen its pods wait for it, whatever the
    PodGroup says (found by review: they joined it; a looser one bound a member alone, then the Job
    made it a partial gang of 3; a stricter one parked them short of pods for good)."""
    j, pods, pg = podgrouper_job(3, pg_min)
    svc = await make_service([*rack_cluster(), pg, *pods])  # the Job's watch event not in yet
    for p in pods:
        doc = await svc.filter(p["metadata"]["name"])
        assert doc["NodeNames"] == [], doc
        assert "waiting for its owner Job default/train to be seen" in doc["Error"] + str(
            doc["FailedNodes"]
        ), doc
    svc.cluster.apply(copy.deepcopy(j))
    await svc.expire(0.5)
    assert all(nudged(svc, *(p["metadata"]["name"] for p in pods)).values())
    assert {
        svc.store.membership(svc.store.pods[f"default/train-{i}"]).group.min_member for i in range(3)
    } == {3}
    node, why = await svc.schedule("train-0")
    assert node, why
    assert set(svc.plan("default/pg-train-u-train")) == {f"default/train-{i}" for i in range(3)}
    svc.check_invariants()


@pytest.mark.parametrize("bound", [False, True], ids=["pending", "running"])
async def test_a_plain_pod_named_like_a_podgroup_is_no_member_of_its_gang(make_service, bound):
    """Pod g in no gang, beside KAI PodGroup g (minMember 3) with two members: the pod's group of one
    had the PodGroup's key, and the gang counted it toward its quorum and bound 2 of 3 (found by
    review). A group of one's key names the pod (`ns/pod:NAME`), never a PodGroup's gang."""
    objs = [
        *rack_cluster(),
        make_kai_podgroup("g", min_member=3),
        gang_pod("g-0", "g"),
        gang_pod("g-1", "g"),
        make_pod("g", node="n010" if bound else None),
    ]
    svc = await make_service(objs)
    assert [r.key for r in svc.store.group_members("default/g")] == ["default/g-0", "default/g-1"]
    for n in ("g-0", "g-1"):
        doc = await svc.filter(n)
        assert doc["NodeNames"] == [] and "2 exist, 3 needed" in next(iter(doc["FailedNodes"].values()))
    assert not bound or svc.node_of("g") == "n010"
    if not bound:
        node, why = await svc.schedule("g")  # the pod itself schedules as any plain pod
        assert node, why
        assert await svc.bind("g", node) == ""
    await svc.expire(0.5)
    assert nudged(svc, "g-0", "g-1") == {"g-0": False, "g-1": False}  # its quorum is still short
    svc.check_invariants()
