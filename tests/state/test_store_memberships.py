"""Plain pods (groups of one) cost the store no membership and no index entry, and every answer about
groups stays what deriving each pod's membership would give."""

from __future__ import annotations

from typing import Any

import pytest

from extender.grouping import membership as grouping_membership
from extender.model.group import MembershipState, Source
from extender.model.keys import group_key
from extender.scheduling.disruption import GangDisruption
from extender.state.store import ClusterStore, is_terminal
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "namespace": "default", "uid": "job-1"},
    "spec": {"parallelism": 2, "completions": 2},
}
REPLICASET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1", "uid": "rs-1"}}


def _terminal(pod: dict[str, Any]) -> dict[str, Any]:
    pod["status"] = {"phase": "Succeeded"}
    return pod


def _no_namespace(pod: dict[str, Any]) -> dict[str, Any]:
    del pod["metadata"]["namespace"]
    return pod


def _with(pod: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    obj = pod
    for part in path[:-1]:
        obj = obj.setdefault(part, {})
    obj[path[-1]] = value
    return pod


# (pod, whether it is surely a group of one)
POD_CASES = [
    (make_pod("plain"), True),
    (make_pod("bound", node="n1"), True),
    (make_pod("web-1-abc", owner=REPLICASET), True),  # its owner is not a kind the store holds
    (_no_namespace(make_pod("nameless")), True),
    (make_pod("job-0", owner=JOB), False),
    (make_pod("job-gone", owner={**JOB, "metadata": {**JOB["metadata"], "uid": "other"}}), False),
    (gang_pod("g-0", "g"), False),
    (gang_pod("g-missing", "nope"), False),
    (make_pod("skip", annotations={"kai.scheduler/skip-podgrouper": "true"}), False),
    (make_pod("k8s", scheduling_group="pg"), False),
    (_with(make_pod("bad-spec"), ("spec",), ["not", "a", "dict"]), False),
    (_with(make_pod("bad-notes"), ("metadata", "annotations"), "x"), False),
    (_with(make_pod("bad-owners"), ("metadata", "ownerReferences"), "x"), True),
    (_terminal(make_pod("done")), True),
    (_terminal(make_pod("job-done", owner=JOB)), False),
]


def _store(pods: list[dict[str, Any]]) -> ClusterStore:
    store = ClusterStore()
    store.upsert(make_node("n1"))
    store.upsert(JOB)
    store.upsert(make_kai_podgroup("g", min_member=2))
    for pod in pods:
        store.upsert(pod)
    return store


@pytest.mark.parametrize(("pod", "single"), POD_CASES, ids=[p["metadata"]["name"] for p, _ in POD_CASES])
def test_is_single_pod_agrees_with_the_full_derivation(pod, single, monkeypatch):
    store = _store([])
    assert grouping_membership.is_single_pod(pod, store) is single
    fast = grouping_membership.derive_membership(pod, store)
    monkeypatch.setattr(grouping_membership, "is_single_pod", lambda *_: False)
    assert fast == grouping_membership.derive_membership(pod, store)
    if single:
        assert fast.group is not None and fast.group.source is Source.SINGLE_POD


def test_group_members_are_what_each_pods_membership_says():
    pods = [p for p, _ in POD_CASES if isinstance(p["spec"], dict)]
    store = _store(pods)
    expected: dict[str, list[str]] = {}
    for rec in store.pods.values():
        m = grouping_membership.derive_membership(rec.obj, store)
        if m.state is MembershipState.MEMBER and m.group is not None and not is_terminal(rec.obj):
            expected.setdefault(m.group.key, []).append(rec.key)
    assert len(expected) > 5
    for key, members in expected.items():
        assert [r.key for r in store.group_members(key)] == sorted(members), key
    assert store.group_members(group_key("default", "done")) == []  # terminal: in no group


def test_a_synced_cluster_of_plain_pods_keeps_no_membership_nor_index_entry():
    pods = [
        make_pod(f"p{i}", node="n1" if i % 2 else None, owner=REPLICASET if i % 3 else None)
        for i in range(30)
    ]
    store = ClusterStore()
    disruption = GangDisruption(store, clock=lambda: 0.0, wall_clock=lambda: 0.0)
    store.upsert(make_node("n1"))
    for pod in pods:
        store.upsert(pod)
    assert disruption.decide() == []
    members = store.group_members(group_key("default", "pod:p7"))
    assert [r.key for r in members] == ["default/p7"]
    assert store.membership(members[0]).group.source is Source.SINGLE_POD
    assert all(rec.membership is None for rec in store.pods.values())
    assert store._group_index == {} and store._pod_group == {}


def test_finished_counts_follow_the_pods_then_the_jobs_status():
    """Succeeded members count per leaf as the pods say, and once they are deleted as their Job keeps
    it; failed ones never count; an index rebuild (a grouping change) gives the same answer."""
    store = _store([make_pod(f"job-{i}", owner=JOB) for i in range(3)])
    group = store.membership(store.pods["default/job-0"]).group
    assert store.finished_counts(group) == {}
    for name, phase in (("job-0", "Succeeded"), ("job-1", "Failed")):
        pod = make_pod(name, owner=JOB, node="n1")
        pod["status"] = {"phase": phase}
        store.upsert(pod)
    assert store.finished_counts(group) == {None: 1}
    assert [r.key for r in store.group_members(group.key)] == ["default/job-2"]  # live ones only
    gen = store.grouping_gen
    store.upsert(make_kai_podgroup("g", min_member=3))  # a grouping change: the index is rebuilt
    assert store.grouping_gen > gen
    assert store.finished_counts(group) == {None: 1}
    store.remove(store.pods["default/job-0"].obj)  # the pod garbage collector
    assert store.finished_counts(group) == {}
    store.upsert({**JOB, "status": {"succeeded": 2, "failed": 1}})
    assert store.finished_counts(group) == {None: 2}
    recreated = {**JOB, "metadata": {**JOB["metadata"], "uid": "job-2"}, "status": {"succeeded": 5}}
    store.upsert(recreated)  # another Job under the name: not the one the pods belong to
    assert store.finished_counts(group) == {}
    store.upsert({**JOB, "status": {"succeeded": 2}})  # its own again
    assert store.finished_counts(group) == {None: 2}
    store.upsert({**JOB, "status": {}})  # a count the Job no longer keeps
    assert store.finished_counts(group) == {}
    store.upsert({**JOB, "status": {"succeeded": 3}})
    store.remove(JOB)  # deleted: its count goes with it
    assert store.finished_counts(group) == {}


@pytest.mark.parametrize(
    ("steps", "counting"),
    [
        ([("a", {"succeeded": 1}), ("b", {"succeeded": 2})], {"default/a", "default/b"}),
        ([("a", {"succeeded": 1}), ("b", {"succeeded": 2}), ("a", None)], {"default/b"}),
        ([("a", {"succeeded": 1}), ("a", {"active": 1})], set()),
        ([("a", {"succeeded": 1}), ("a", "not an object")], set()),  # malformed: taken, counts nothing
        ([("a", {"active": 3})], set()),
    ],
)
def test_the_jobs_that_count_finished_pods_are_kept_by_events(steps, counting):
    """The Jobs whose status counts succeeded pods, per namespace: a gang's finished count walks its
    members for their Jobs only where one does (`finished_counts`). None: the Job deleted."""
    store = ClusterStore()
    for name, status in steps:
        job = {**JOB, "metadata": {**JOB["metadata"], "name": name, "uid": f"{name}-uid"}, "status": status}
        if status is None:
            store.remove(job)
        else:
            store.upsert(job)
    assert store._succeeded_jobs.get("default", set()) == counting
    assert set(store._succeeded_jobs) == ({"default"} if counting else set())


def test_an_external_podgroups_own_succeeded_count_is_read():
    store = _store([gang_pod("g-0", "g")])
    group = store.membership(store.pods["default/g-0"]).group
    assert store.finished_counts(group) == {}
    store.upsert({**make_kai_podgroup("g", min_member=2), "status": {"succeeded": 1, "running": 0}})
    assert store.finished_counts(group) == {None: 1}


def _failed(pod: dict[str, Any]) -> dict[str, Any]:
    pod["status"] = {"phase": "Failed"}
    return pod


@pytest.mark.parametrize("owners_first", [True, False], ids=["owners-first", "pods-first"])
def test_grouped_pods_are_the_pods_not_surely_plain_whatever_came_first(owners_first):
    """What a scan for gangs looks at (the disruption's after a sync) is every pod is_single_pod does
    not call plain, terminal or not, as the cache holds it now: a pod its Job owns is never surely
    plain, listed before its Job or after the Job is deleted (it waits for it, unsure)."""
    pods = [p for p, _ in POD_CASES if isinstance(p["spec"], dict)]
    pods += [_failed(make_pod("job-failed", owner=JOB)), _failed(make_pod("failed"))]
    store = ClusterStore()
    owners = [make_node("n1"), JOB, make_kai_podgroup("g", min_member=2)]
    for obj in (*owners, *pods) if owners_first else (*pods, *owners):
        store.upsert(obj)

    def expected() -> list[str]:
        return sorted(
            r.key for r in store.pods.values() if not grouping_membership.is_single_pod(r.obj, store)
        )

    assert "default/job-failed" in expected() and "default/failed" not in expected()
    assert sorted(r.key for r in store.grouped_pods()) == expected()
    store.remove(JOB)
    assert "default/job-failed" in expected()
    assert sorted(r.key for r in store.grouped_pods()) == expected()
    store.remove(store.pods["default/g-0"].obj)
    assert sorted(r.key for r in store.grouped_pods()) == expected()
