"""Issue 21: a derived gang's tree is validated as it is read, and a PodGroup derived for a workload
takes only that workload's pods."""

from __future__ import annotations

import pytest

from extender.grouping import GroupingError, ListLookup, derive_membership, groups_for_workload, kai
from extender.model.group import MembershipState
from tests.builders import make_pod
from tests.grouping.test_edge_cases import jobset, pods_and_lookup


# -------------------------------------------------------------- 11: derived subgroup names are unique
@pytest.mark.parametrize(
    ("rjs", "colliding"),
    [
        ([("a", 1, 2), ("a-replica-0", 1, 2)], "a-replica-0"),  # rj a's replica 0 is rj a-replica-0's parent
        ([("a", 2, 1), ("a-replica-1", 1, 1)], "a-replica-1"),
        ([("x", 1, 1), ("x", 1, 1)], "x"),  # the same replicatedJob name twice
    ],
)
def test_a_derived_jobset_tree_with_colliding_subgroup_names_is_invalid(rjs, colliding):
    js = jobset(rjs)
    pods, lookup = pods_and_lookup(js)
    for pod in pods:
        m = derive_membership(pod, lookup)
        assert m.state is MembershipState.INVALID, pod["metadata"]["name"]
        assert repr(colliding) in m.message and "rename" in m.message
    with pytest.raises(GroupingError) as err:
        groups_for_workload(js, lookup)
    assert err.value.field.startswith("spec.replicatedJobs[")


@pytest.mark.parametrize(
    "rjs",
    [
        [("a", 1, 2), ("b-replica-0", 1, 2)],
        [("a", 0, 2), ("b", 1, 2)],  # scaled to no replicas: a parent without children
    ],
)
def test_a_derived_jobset_tree_with_distinct_names_is_valid(rjs):
    js = jobset(rjs)
    pods, lookup = pods_and_lookup(js)
    assert pods and {derive_membership(p, lookup).state for p in pods} == {MembershipState.MEMBER}
    assert groups_for_workload(js, lookup)


# -------------------------------------------------------------- 12: a derived PodGroup is its workload's
def job(name: str = "train", uid: str = "job-uid", parallelism: int = 2) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "annotations": {"kai.scheduler/batch-min-member": str(parallelism)},
        },
        "spec": {"parallelism": parallelism, "template": {"spec": {}}},
    }


def derived_podgroup(workload: dict, *, managed: bool) -> dict:
    group = kai.derive_group(workload, owners=(), pod=None)
    pg = kai.podgroup_object(group, top=workload)
    if managed:
        pg["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "gang-extender"}
    return pg


@pytest.mark.parametrize("managed", [True, False], ids=["ours", "kai-podgrouper's"])
def test_a_foreign_pod_naming_a_workloads_derived_podgroup_does_not_join_its_gang(managed):
    train = job()
    pg = derived_podgroup(train, managed=managed)
    name = pg["metadata"]["name"]
    member = make_pod("train-0", owner=train, annotations={"pod-group-name": name})
    foreign = make_pod("intruder", annotations={"pod-group-name": name})  # ownerless
    skipping = make_pod(
        "skipper",
        annotations={"pod-group-name": name, "kai.scheduler/skip-podgrouper": "true"},
        owner=job("other", uid="other-uid"),
    )
    lookup = ListLookup([train, job("other", uid="other-uid"), pg, member, foreign, skipping])
    mine = derive_membership(member, lookup)
    assert mine.state is MembershipState.MEMBER and mine.group.key == f"default/{name}"
    for pod in (foreign, skipping):
        m = derive_membership(pod, lookup)
        assert m.state is MembershipState.INVALID, pod["metadata"]["name"]
        assert f"default/{name}" in m.message and "Job default/train" in m.message
        assert "create a PodGroup of your own" in m.message


def test_a_pod_of_the_workload_may_name_its_derived_podgroup_externally():
    """skip-podgrouper on a Job's pod template naming the PodGroup kept for that very Job: its own."""
    train = job()
    pg = derived_podgroup(train, managed=True)
    name = pg["metadata"]["name"]
    pod = make_pod(
        "train-0", owner=train, annotations={"pod-group-name": name, "kai.scheduler/skip-podgrouper": "true"}
    )
    m = derive_membership(pod, ListLookup([train, pg, pod]))
    assert m.state is MembershipState.MEMBER and m.group.key == f"default/{name}"


def test_a_user_podgroup_takes_any_pod():
    """An external PodGroup (no workload derived it) is the contract's way to join pods of anything."""
    pg = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "shared", "namespace": "default"},
        "spec": {"minMember": 2, "queue": "q"},
    }
    a = make_pod("a", annotations={"pod-group-name": "shared"})
    b = make_pod("b", annotations={"pod-group-name": "shared"})
    lookup = ListLookup([pg, a, b])
    assert {derive_membership(p, lookup).state for p in (a, b)} == {MembershipState.MEMBER}
