"""Gang membership is an index kept by events: a workload's tree is derived once per version of its
objects, and a change to a workload or group object re-derives only the pods that read it. The
work is counted (derivations, tree builds), never timed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender import grouping
from extender.grouping import kai
from extender.model.group import MembershipState
from extender.state.embedded import EmbeddedCluster
from extender.state.store import ClusterStore
from tests.builders import gang_pod, make_kai_podgroup, make_node
from tests.grouping.workloads import expand


def jobset(name: str, n_rjs: int) -> dict[str, Any]:
    pod_template = {"spec": {"schedulerName": "gang-scheduler", "containers": [{"name": "m"}]}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": f"rj{i}",
                    "replicas": 1,
                    "template": {"spec": {"parallelism": 1, "template": pod_template}},
                }
                for i in range(n_rjs)
            ]
        },
    }


class Counts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.derived = 0
        self.trees = 0
        derive, tree = grouping.derive_membership, kai._jobset_group

        def counted_derive(*a: Any, **kw: Any):
            self.derived += 1
            return derive(*a, **kw)

        def counted_tree(*a: Any, **kw: Any):
            self.trees += 1
            return tree(*a, **kw)

        monkeypatch.setattr(grouping, "derive_membership", counted_derive)
        monkeypatch.setattr(kai, "_jobset_group", counted_tree)

    def take(self) -> tuple[int, int]:
        out = (self.derived, self.trees)
        self.derived = self.trees = 0
        return out


class World:
    def __init__(self, n_rjs: int) -> None:
        self.store = ClusterStore()
        self.cluster = EmbeddedCluster([make_node("n1")])
        self.cluster.attach(self.store)
        big = jobset("big", n_rjs)
        jobs, pods = expand(big)
        self.big_jobs = jobs
        for obj in (big, *jobs, *pods):
            self.cluster.apply(obj)
        self.cluster.apply(make_kai_podgroup("small", min_member=2))
        for i in range(2):
            self.cluster.apply(gang_pod(f"small-{i}", "small"))
        pod = next(iter(self.store.pods.values()))
        self.big_key = self.store.membership(pod).group.key

    def touch(self, group: str, kind: str, name: str, label: str) -> None:
        obj = copy.deepcopy(self.cluster.get(group, kind, "default", name))
        obj["metadata"].setdefault("labels", {})["touched"] = label
        self.cluster.apply(obj)

    def members(self) -> tuple[int, int]:
        return len(self.store.group_members(self.big_key)), len(self.store.group_members("default/small"))


@pytest.mark.parametrize("n_rjs", [20, 200])
def test_a_workload_change_re_derives_only_the_pods_that_read_it(n_rjs, monkeypatch):
    w = World(n_rjs)
    counts = Counts(monkeypatch)
    assert w.members() == (n_rjs, 2)
    assert counts.take() == (0, 0)  # the index was kept as the pods arrived: asking derives nothing

    assert w.members() == (n_rjs, 2)
    assert counts.take() == (0, 0)  # nothing changed: nothing derived

    # a child Job changes (its controller relabels it): only its own pod is derived again, and the
    # JobSet's tree is not rebuilt
    w.touch("batch", "Job", w.big_jobs[3]["metadata"]["name"], "a")
    assert w.members() == (n_rjs, 2)
    assert counts.take() == (1, 0)

    # an unrelated gang's PodGroup changes: the big JobSet's pods are not looked at
    w.touch("scheduling.run.ai", "PodGroup", "small", "a")
    assert w.members() == (n_rjs, 2)
    assert counts.take() == (2, 0)

    # the JobSet itself changes: each of its pods once, over one tree
    w.touch("jobset.x-k8s.io", "JobSet", "big", "a")
    assert w.members() == (n_rjs, 2)
    assert counts.take() == (n_rjs, 1)


def test_a_pod_seen_before_its_job_joins_the_gang_when_the_job_arrives():
    store = ClusterStore()
    cluster = EmbeddedCluster([make_node("n1")])
    cluster.attach(store)
    big = jobset("late", 3)
    jobs, pods = expand(big)
    cluster.apply(big)
    for obj in pods:  # the pods first: each waits for its Job, never a group of one meanwhile
        cluster.apply(obj)
    assert {store.membership(r).state for r in store.pods.values()} == {MembershipState.GROUP_MISSING}
    for obj in jobs[:2]:
        cluster.apply(obj)
    rec = store.pods[f"default/{pods[0]['metadata']['name']}"]
    key = store.membership(rec).group.key
    first_two = sorted(f"default/{p['metadata']['name']}" for p in pods[:2])
    assert [r.key for r in store.group_members(key)] == first_two
    cluster.apply(jobs[2])
    assert len(store.group_members(key)) == 3
    cluster.delete("batch", "Job", "default", jobs[0]["metadata"]["name"])
    assert len(store.group_members(key)) == 2
    gone = store.membership(store.pods[f"default/{pods[0]['metadata']['name']}"])
    assert gone.state is MembershipState.GROUP_MISSING
    assert f"waiting for its owner Job default/{jobs[0]['metadata']['name']} to be seen" in gone.message


def test_a_status_update_keeps_the_tree_and_every_member_shares_it(monkeypatch):
    w = World(5)
    counts = Counts(monkeypatch)
    js = copy.deepcopy(w.cluster.get("jobset.x-k8s.io", "JobSet", "default", "big"))
    js["status"] = {"replicatedJobsStatus": [{"name": "rj0", "active": 1}]}
    w.cluster.apply(js)  # a new resourceVersion, nothing grouping reads
    assert counts.take() == (0, 0)
    pod = copy.deepcopy(w.cluster.get("", "Pod", "default", "big-rj0-0-0"))
    pod["metadata"]["labels"]["touched"] = "1"
    w.cluster.apply(pod)  # the pod derived again, over the tree kept for the JobSet
    assert counts.take() == (1, 0)
    groups = {id(w.store.membership(r).group) for r in w.store.group_members(w.big_key)}
    assert len(groups) == 1


def test_clusters_whose_objects_share_names_and_versions_keep_their_own_trees():
    # two embedded clusters in one process stamp the same stand-in uids and resourceVersions
    sizes = {}
    for n_rjs in (3, 5):
        store = ClusterStore()
        cluster = EmbeddedCluster([make_node("n1")])
        cluster.attach(store)
        big = jobset("big", n_rjs)
        jobs, pods = expand(big)
        for obj in (big, *jobs, *pods):
            cluster.apply(obj)
        rec = next(iter(store.pods.values()))
        group = store.membership(rec).group
        sizes[n_rjs] = (len(group.subgroups), len(store.group_members(group.key)))
    assert sizes == {3: (6, 3), 5: (10, 5)}


def test_a_workload_nested_past_what_the_fingerprint_writes_is_applied_whole():
    """orjson writes 255 levels and reads 1024; a JobSet whose preserved `spec.scheduling` lies between
    raised out of the fingerprint after the store had taken it, half applied. Now each write of it
    counts as a change, and its pods join its gang."""
    store = ClusterStore()
    store.upsert(make_node("n1"))
    deep: Any = []
    for _ in range(400):
        deep = [deep]
    big = jobset("deep", 2)
    jobs, pods = expand(big)
    big["spec"]["scheduling"] = {"x": deep}
    for obj in (big, *jobs, *pods):
        store.upsert(obj)
    keys = {store.membership(rec).group.key for rec in store.pods.values()}
    assert len(keys) == 1 and next(iter(keys)).startswith("default/deep-"), keys  # KAI's derived name
    assert len(store.group_members(next(iter(keys)))) == 2
    before = store.grouping_gen
    store.upsert(big)
    assert store.grouping_gen == before + 1, "with no fingerprint, a write of it is a change"


@pytest.mark.parametrize("jobset_there", [True, False], ids=["the JobSet listed", "the JobSet gone"])
def test_a_kind_listed_after_start_up_regroups_the_pods_below_its_objects(jobset_there):
    """JobSet's CRD installed after the service started: until its first list, a JobSet's pods are
    grouped by their Jobs (its absence says nothing); once listed, they join the JobSet's gang, or
    wait for a JobSet the list did not have (deleted, its pods going with it)."""
    store = ClusterStore()
    store.listed = frozenset({("", "Pod"), ("", "Node"), ("batch", "Job")})
    store.upsert(make_node("n1"))
    big = jobset("late", 2)
    jobs, pods = expand(big)
    for obj in (*jobs, *pods):
        store.upsert(obj)
    keys = [f"default/{p['metadata']['name']}" for p in pods]
    by_job = {store.membership(store.pods[k]).group.key for k in keys}
    assert len(by_job) == 2, by_job  # one gang per Job, as before the kind is listed
    if jobset_there:
        store.upsert(big)  # the kind's first list
    store.now_lists(kai.JOBSET)
    after = [store.membership(store.pods[k]) for k in keys]
    if jobset_there:
        assert {m.state for m in after} == {MembershipState.MEMBER}
        (key,) = {m.group.key for m in after}
        assert [r.key for r in store.group_members(key)] == sorted(keys)
    else:
        assert {m.state for m in after} == {MembershipState.GROUP_MISSING}
        assert all("waiting for its owner JobSet default/late to be seen" in m.message for m in after)
        assert not any(store.group_members(k) for k in by_job)
