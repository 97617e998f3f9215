"""KAI's contract where it is easy to get wrong: the "default" subgroup, skip-podgrouper without a
group, PodGroup tree rules, and suspended JobSets whose pods name their PodGroup."""

from __future__ import annotations

import pytest

from extender.grouping import ListLookup, derive_membership
from extender.model.group import MembershipState
from tests.grouping.workloads import expand


def podgroup(name="pg", **spec):
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"queue": "team", **spec},
    }


def pod(subgroup=None, group="pg", **extra):
    meta = {"name": "p", "namespace": "ml", "annotations": {"pod-group-name": group}, "labels": {}}
    if subgroup is not None:
        meta["labels"]["kai.scheduler/subgroup-name"] = subgroup
    meta.update(extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}}


LEAVES = [{"name": "default", "minMember": 1}, {"name": "workers", "minMember": 2}]
ONE_LEAF = [{"name": "workers", "minMember": 2}]
TREE = [{"name": "a", "minSubGroup": 1}, {"name": "a-0", "parent": "a", "minMember": 1}]
MISSING = 'Pod references subgroup "{0}", which does not exist in PodGroup ml/pg'


@pytest.mark.parametrize(
    ("spec", "label", "state", "leaf", "message"),
    [
        pytest.param({"minMember": 2}, None, MembershipState.MEMBER, None, "", id="flat group, no label"),
        pytest.param(
            {"minMember": 2}, "default", MembershipState.MEMBER, None, "", id="flat group, label default"
        ),
        pytest.param(
            {"minMember": 2},
            "workers",
            MembershipState.INVALID_SUBGROUP,
            None,
            MISSING.format("workers"),
            id="flat group, another label",
        ),
        pytest.param(
            {"subGroups": LEAVES},
            None,
            MembershipState.MEMBER,
            "default",
            "",
            id="no label joins the leaf named default",
        ),
        pytest.param(
            {"subGroups": ONE_LEAF},
            None,
            MembershipState.INVALID_SUBGROUP,
            None,
            MISSING.format("default"),
            id="no label and no default leaf is the contract's error, even with one leaf",
        ),
        pytest.param(
            {"subGroups": TREE},
            "a",
            MembershipState.INVALID_SUBGROUP,
            None,
            MISSING.format("a"),
            id="an inner subgroup takes no pods",
        ),
        pytest.param(
            {"subGroups": TREE},
            "a-0",
            MembershipState.MEMBER,
            "a-0",
            "",
            id="a leaf of a tree",
        ),
    ],
)
def test_pods_join_kai_pod_sets_as_kai_maps_them(spec, label, state, leaf, message):
    m = derive_membership(pod(label), ListLookup([podgroup(**spec)]))
    assert m.state is state
    assert m.subgroup == leaf
    assert m.message == message


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minMember": 1, "minSubGroup": 1, "subGroups": TREE}, "spec.minSubGroup"),
        ({"minSubGroup": "1", "subGroups": TREE}, "spec.minSubGroup"),
        (
            {"subGroups": [{"name": "a", "minSubGroup": "1"}, {"name": "b", "parent": "a", "minMember": 1}]},
            "spec.subGroups[0].minSubGroup",
        ),
        ({"subGroups": [{"name": "a", "minMember": 1, "minSubGroup": 1}]}, "spec.subGroups[0].minSubGroup"),
        ({"subGroups": [{"name": "a"}]}, "spec.subGroups[0].minMember"),
        (
            {"subGroups": [{"name": "a", "minMember": 1}, {"name": "b", "parent": "a", "minMember": 1}]},
            "spec.subGroups[0].minMember",
        ),
        (
            {
                "subGroups": [
                    {"name": "a", "parent": "b", "minSubGroup": 1},
                    {"name": "b", "parent": "a", "minSubGroup": 1},
                ]
            },
            "spec.subGroups[0].parent",
        ),
        ({"subGroups": [{"name": "a", "parent": "a", "minMember": 1}]}, "spec.subGroups[0].parent"),
    ],
    ids=[
        "minMember and minSubGroup on the root",
        "a minSubGroup that is not a number",
        "a subgroup minSubGroup that is not a number",
        "minMember and minSubGroup on one subgroup",
        "a leaf without minMember",
        "an inner subgroup with minMember",
        "a parent cycle",
        "its own parent",
    ],
)
def test_podgroups_kais_webhook_rejects_are_invalid_naming_the_field(spec, field):
    m = derive_membership(pod("a"), ListLookup([podgroup(**spec)]))
    assert m.state is MembershipState.INVALID
    assert field in m.message


def test_skip_podgrouper_without_a_group_name_waits_instead_of_deriving_a_gang():
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "j",
            "namespace": "ml",
            "uid": "ju",
            "annotations": {"kai.scheduler/skip-podgrouper": "true"},
        },
        "spec": {"parallelism": 2, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }
    _, pods = expand(job)
    m = derive_membership(pods[0], ListLookup([job]))
    assert m.state is MembershipState.GROUP_MISSING
    assert "no pod-group-name annotation" in m.message


def test_a_suspended_jobsets_pods_naming_their_podgroup_have_no_group():
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "t", "namespace": "ml", "uid": "tu"},
        "spec": {
            "scheduling": {"schedulingPolicy": {"gang": {}}},
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {"spec": {"parallelism": 2, "template": {"spec": {}}}},
                }
            ],
        },
    }
    owners, pods = expand(js)
    assert pods[0]["spec"].get("schedulingGroup"), "the controller names the PodGroup on the pod"
    running = derive_membership(pods[0], ListLookup([js, *owners]))
    assert running.state is MembershipState.MEMBER
    js["spec"]["suspend"] = True
    suspended = derive_membership(pods[0], ListLookup([js, *owners]))
    assert suspended.state is MembershipState.GROUP_MISSING
    assert "suspended" in suspended.message
