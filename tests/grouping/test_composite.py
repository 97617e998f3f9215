"""CompositePodGroup trees (1.37) as one gang: the tree a pod's PodGroup hangs in, compiled with the
rules of KEP-6012; and the trees kube-scheduler marks Invalid, refused with why."""

from __future__ import annotations

import pytest

from extender.grouping import ListLookup, derive_membership, groups_for_workload
from extender.model.group import Disruption, MembershipState, Source, SubGroup, TopologyConstraint

RACK, BLOCK = "topology.kubernetes.io/rack", "topology.kubernetes.io/block"


def cpg(
    name: str, *, parent: str | None = None, count: int | None = 2, key: str | None = None, **spec
) -> dict:
    body = {
        "workloadRef": {"workloadName": "train", "templateName": name},
        "schedulingPolicy": {"gang": {"minGroupCount": count}} if count else {"basic": {}},
        **spec,
    }
    if parent:
        body["parentCompositePodGroupName"] = parent
    if key:
        body["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": body,
    }


def pg(
    name: str, parent: str, *, count: int | None = 4, key: str | None = None, workload: str = "train", **spec
) -> dict:
    body = {
        "parentCompositePodGroupName": parent,
        "workloadRef": {"workloadName": workload, "templateName": "workers"},
        "schedulingPolicy": {"gang": {"minCount": count}} if count else {"basic": {}},
        **spec,
    }
    if key:
        body["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": body,
    }


def pod(group: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group}-0", "namespace": "ml"},
        "spec": {"schedulingGroup": {"podGroupName": group}},
    }


def test_a_two_level_tree_is_one_gang_with_its_topology_top_down() -> None:
    objects = [
        cpg("train", count=2, key=BLOCK, priority=500, disruptionMode={"all": {}}),
        pg("workers-a", "train", count=4, key=RACK),
        pg("workers-b", "train", count=3, key=RACK),
    ]
    m = derive_membership(pod("workers-b"), ListLookup(objects))
    assert m.state is MembershipState.MEMBER, m.message
    assert m.subgroup == "workers-b"
    g = m.group
    assert (g.key, g.source, g.min_subgroup, g.priority, g.disruption) == (
        "ml/train",
        Source.K8S_COMPOSITE,
        2,
        500,
        Disruption.ALL,
    )
    assert g.topology == TopologyConstraint(required_level=BLOCK)
    assert g.subgroups == (
        SubGroup("workers-a", min_member=4, topology=TopologyConstraint(required_level=RACK)),
        SubGroup("workers-b", min_member=3, topology=TopologyConstraint(required_level=RACK)),
    )
    assert g.quorum_upper_bound() == 7
    assert g.ready_leaves({"workers-a": 4, "workers-b": 2}) is None  # minGroupCount 2: both
    assert g.ready_leaves({"workers-a": 4, "workers-b": 3}) == ("workers-a", "workers-b")


def test_a_three_level_tree_nests_composites_and_a_basic_one_waits_for_no_sibling() -> None:
    objects = [
        cpg("root", count=1),
        cpg("half-a", parent="root", count=None, key=BLOCK),  # basic: any one child
        pg("a0", "half-a", count=2),
        pg("a1", "half-a", count=2),
        cpg("half-b", parent="root", count=2),
        pg("b0", "half-b", count=None),  # basic leaf: one pod
        pg("b1", "half-b", count=1),
    ]
    g = derive_membership(pod("a1"), ListLookup(objects)).group
    assert [(s.name, s.parent, s.min_member, s.min_subgroup) for s in g.subgroups] == [
        ("half-a", None, None, 1),
        ("half-b", None, None, 2),
        ("a0", "half-a", 2, None),
        ("a1", "half-a", 2, None),
        ("b0", "half-b", 1, None),
        ("b1", "half-b", 1, None),
    ]
    assert g.min_subgroup == 1 and g.priority == 0 and g.disruption is Disruption.SINGLE
    assert g.ready_leaves({"a1": 2}) == ("a1",)


@pytest.mark.parametrize(
    ("objects", "says"),
    [
        ([cpg("x", parent="y", count=1), cpg("y", parent="x", count=1), pg("p", "x")], "form a cycle"),
        (
            [cpg("r"), cpg("c1", parent="r"), cpg("c2", parent="c1"), cpg("c3", parent="c2"), pg("p", "c3")],
            "depth at most 4",
        ),
        ([cpg("r"), pg("p", "r"), pg("q", "r", workload="other")], "more than one Workload"),
        ([cpg("r", count=1), pg("p", "r", schedulingPolicy={"gang": {"minCount": 0}})], "at least 1"),
    ],
    ids=["a cycle", "deeper than 4", "two Workloads", "a gang of 0"],
)
def test_a_tree_kube_scheduler_marks_invalid_is_refused_with_why(objects: list[dict], says: str) -> None:
    m = derive_membership(pod("p"), ListLookup(objects))
    assert m.state is MembershipState.INVALID and says in m.message, m


def test_a_missing_composite_is_waited_for() -> None:
    m = derive_membership(pod("p"), ListLookup([pg("p", "train")]))
    assert m.state is MembershipState.GROUP_MISSING
    assert m.message == "waiting for CompositePodGroup ml/train (scheduling.k8s.io) to exist"


def test_a_podgroup_in_a_tree_yields_the_trees_gang() -> None:
    objects = [cpg("train", count=1), pg("workers", "train")]
    (group,) = groups_for_workload(objects[1], ListLookup(objects))
    assert (group.key, group.source) == ("ml/train", Source.K8S_COMPOSITE)
