"""Properties over random JobSets and Jobs: every pod maps to exactly one leaf, quorums never
exceed the pods that exist, and compilation is deterministic."""

from __future__ import annotations

import collections
import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.grouping import ListLookup, compile_jobset, derive_membership, groups_for_workload
from extender.model import labels as keys
from extender.model.group import MembershipState, Policy
from tests.grouping.workloads import expand

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def jobsets(draw):
    n = draw(st.integers(1, 3))
    rjs = [(f"rj{i}", draw(st.integers(1, 3)), draw(st.integers(1, 4))) for i in range(n)]
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": draw(st.sampled_from(["a", "train", "x" * 40])), "namespace": "ns"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": name,
                    "replicas": r,
                    "template": {"spec": {"parallelism": p, "template": {"spec": {}}}},
                }
                for name, r, p in rjs
            ]
        },
    }
    if draw(st.booleans()) and n > 1:
        js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "rj0", "status": "Ready"}]
    mode = draw(st.sampled_from(["kai", "empty", "gang", "basic", "entries"]))
    sequenced = "dependsOn" in js["spec"]["replicatedJobs"][-1] or (
        n > 1 and "dependsOn" in js["spec"]["replicatedJobs"][1]
    )
    if mode == "kai":
        if draw(st.booleans()):
            js["metadata"]["annotations"] = {keys.BATCH_MIN_MEMBER: str(draw(st.integers(1, 5)))}
        return js
    if mode == "empty" or (mode == "gang" and sequenced):
        js["spec"]["scheduling"] = {}
    elif mode == "gang":
        js["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {}}}
    elif mode == "basic":
        js["spec"]["scheduling"] = {"schedulingPolicy": {"basic": {}}}
    else:
        names = [r[0] for r in rjs]
        cut = draw(st.integers(1, len(names)))
        groups = [names[:cut], names[cut:]] if cut < len(names) else [names]
        entries = []
        for g in groups:
            replicas = rjs[names.index(g[0])][1]
            if len(g) == 1 and draw(st.booleans()):
                job = {"schedulingPolicy": {"gang": {"minCount": draw(st.integers(0, 1))}}}
                entries.append({"targetReplicatedJobs": g, "job": job})
                assert replicas <= 3
            else:
                policy = draw(st.sampled_from([None, {"gang": {}}, {"basic": {}}]))
                entries.append(
                    {"targetReplicatedJobs": g, **({"schedulingPolicy": policy} if policy else {})}
                )
        js["spec"]["scheduling"] = {"replicatedJobs": entries}
    return js


@st.composite
def jobs(draw):
    parallelism = draw(st.integers(0, 6))
    anns = {}
    if draw(st.booleans()):
        anns[keys.BATCH_MIN_MEMBER] = str(draw(st.integers(1, 10)))
    spec = {"parallelism": parallelism, "template": {"spec": {}}}
    if draw(st.booleans()):
        spec["completions"] = draw(st.integers(0, 6))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "annotations": anns},
        "spec": spec,
    }


def check_membership(workload: dict) -> None:
    owners, pods = expand(workload)
    lookup = ListLookup([workload, *owners, *pods])
    groups = {g.key: g for g in groups_for_workload(workload, lookup)}
    per_leaf: collections.Counter = collections.Counter()
    for pod in pods:
        m = derive_membership(pod, lookup)
        assert m.state is MembershipState.MEMBER, m.message
        assert m.group.key in groups
        leaves = [s.name for s in m.group.leaves()]
        if m.group.subgroups:
            assert leaves.count(m.subgroup) == 1
        else:
            assert m.subgroup is None
        per_leaf[(m.group.key, m.subgroup)] += 1
    for key, group in groups.items():
        pods_in_group = sum(c for (k, _), c in per_leaf.items() if k == key)
        if group.policy is Policy.GANG:
            assert group.quorum_upper_bound() <= max(pods_in_group, 1) or pods_in_group == 0
        for leaf in group.leaves():
            assert (leaf.min_member or 0) <= per_leaf[(key, leaf.name)]
        for node in (None, *(s.name for s in group.subgroups)):
            kids = group.children(node)
            need = group.min_subgroup if node is None else group.subgroup(node).min_subgroup
            if kids and need is not None:
                assert need <= len(kids)
        # the gang is ready once every pod exists
        counts = {leaf: per_leaf[(key, leaf)] for (k, leaf) in per_leaf if k == key}
        if pods_in_group:
            assert group.ready_leaves(counts) is not None


@FAST
@given(jobsets())
def test_every_jobset_pod_maps_to_exactly_one_leaf_and_quorums_fit(js):
    check_membership(js)


@FAST
@given(jobs())
def test_every_job_pod_maps_to_one_group_and_the_quorum_fits(job):
    check_membership(job)


@FAST
@given(jobsets())
def test_compile_is_deterministic(js):
    first = compile_jobset(js)
    again = compile_jobset(copy.deepcopy(js))
    assert first.workload == again.workload
    assert first.podgroups == again.podgroups
    assert first.groups == again.groups
    names = [pg["metadata"]["name"] for pg in first.podgroups]
    assert len(set(names)) == len(names)
    assert all(len(n) <= 63 for n in names)
