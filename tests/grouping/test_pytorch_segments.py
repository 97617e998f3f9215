"""PyTorchJob gangs as KAI groups them: quorum precedence, and workers split into topology segments."""

from __future__ import annotations

import pytest

from extender.grouping import ListLookup, derive_membership, groups_for_workload
from extender.model.group import MembershipState, TopologyConstraint
from tests.grouping.workloads import expand


def pytorchjob(workers=8, *, master=1, segment=None, worker_anns=None, min_available=None, job_anns=None):
    worker_template = {
        "metadata": {"annotations": dict(worker_anns or {})},
        "spec": {"containers": [{"name": "w"}]},
    }
    if segment is not None:
        worker_template["metadata"]["annotations"]["kai.scheduler/segment-size"] = str(segment)
    specs = {"Worker": {"replicas": workers, "template": worker_template}}
    if master:
        specs["Master"] = {"replicas": master, "template": {"spec": {"containers": [{"name": "m"}]}}}
    spec = {"pytorchReplicaSpecs": specs}
    if min_available is not None:
        spec["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "ml", "uid": "pt-uid", "annotations": dict(job_anns or {})},
        "spec": spec,
    }


def test_workers_split_into_segments_each_in_its_own_rack():
    job = pytorchjob(
        10,
        segment=4,
        worker_anns={"kai.scheduler/segment-topology-required-placement": "rack"},
        job_anns={"kai.scheduler/topology": "dc"},
    )
    (group,) = groups_for_workload(job, ListLookup([job]))
    by_name = {s.name: s for s in group.subgroups}
    assert by_name["worker"].min_subgroup == 3 and by_name["worker"].min_member is None
    assert [(by_name[f"worker-{i}"].min_member, by_name[f"worker-{i}"].parent) for i in range(3)] == [
        (4, "worker"),
        (4, "worker"),
        (2, "worker"),  # the last segment takes the remainder
    ]
    assert by_name["worker-0"].topology == TopologyConstraint("dc", "rack", None)
    assert group.quorum_upper_bound() == 11  # master + 10 workers
    _, pods = expand(job)
    leaves = {}
    for p in pods:
        m = derive_membership(p, ListLookup([job]))
        assert m.state is MembershipState.MEMBER
        leaves.setdefault(m.subgroup, []).append(p["metadata"]["name"])
    assert {k: len(v) for k, v in leaves.items()} == {
        "master": 1,
        "worker-0": 4,
        "worker-1": 4,
        "worker-2": 2,
    }


def test_segments_past_the_quorum_are_elastic():
    job = pytorchjob(8, master=0, segment=2, min_available=4)
    (group,) = groups_for_workload(job, ListLookup([job]))
    mins = [s.min_member for s in group.subgroups if s.name.startswith("worker-")]
    assert mins == [2, 2, 0, 0]


@pytest.mark.parametrize(
    ("segment", "field"),
    [("zero", "kai.scheduler/segment-size"), ("0", "kai.scheduler/segment-size")],
    ids=["not a number", "zero"],
)
def test_a_bad_segment_size_names_the_annotation(segment, field):
    job = pytorchjob(4, segment=segment)
    _, pods = expand(job)
    m = derive_membership(pods[0], ListLookup([job]))
    assert m.state is MembershipState.INVALID and field in m.message


def test_with_min_available_a_replica_spec_without_replicas_runs_one():
    job = pytorchjob(4, min_available=2)
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    (group,) = groups_for_workload(job, ListLookup([job]))
    assert group.min_member == 2
    without = pytorchjob(4)
    del without["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    _, pods = expand(pytorchjob(1))
    m = derive_membership(pods[0], ListLookup([without]))
    assert m.state is MembershipState.INVALID and "replicas" in m.message
