"""What a large or malformed workload costs everyone else: a gang whose tree is past the limits is
refused with its reason while unrelated gangs plan and bind (fair-share admission included), and a
filter's derivation work does not grow with the size of other workloads. Counted, never timed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.grouping import kai
from extender.model import labels as keys
from extender.model.group import MAX_SUBGROUP_DEPTH
from extender.scheduling.decisions import BindVerdict, FilterDecision, Verdict
from extender.scheduling.ledger import GangLedger
from extender.scheduling.podgrouper import Action, step_for
from extender.scheduling.scheduler import Scheduler
from extender.state.embedded import EmbeddedCluster
from extender.state.store import ClusterStore
from tests.builders import gang_pod, make_kai_podgroup, make_node
from tests.grouping.test_tree_limits import _Counted, big_jobset, chain
from tests.grouping.workloads import expand
from tests.state.test_store_regroup import Counts, jobset


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


class World:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.store = ClusterStore()
        self.cluster = EmbeddedCluster(objects)
        self.cluster.attach(self.store)
        ledger = GangLedger(
            self.store, wait_s=5, hold_s=5, backoff_initial_s=2, backoff_max_s=60, clock=Clock()
        )
        self.scheduler = Scheduler(self.store, ledger)

    def pod(self, name: str) -> dict[str, Any]:
        pod = self.cluster.get("", "Pod", "default", name)
        assert pod is not None
        return pod

    def filter(self, name: str) -> FilterDecision:
        return self.scheduler.filter(self.pod(name), sorted(self.store.node_rows))

    def schedule(self, *names: str) -> None:
        for name in names:
            decision = self.filter(name)
            if decision.verdict is Verdict.PASS:
                self.bind(name, decision.passed[0])

    def bind(self, name: str, node: str) -> None:
        pod = self.pod(name)
        d = self.scheduler.bind(namespace="default", name=name, uid=pod["metadata"]["uid"], node=node)
        if d.verdict is BindVerdict.NOW:
            self.cluster.apply({**pod, "spec": {**pod["spec"], "nodeName": node}})
            self.scheduler.bind_done(f"default/{name}", node, "")
        elif d.verdict is BindVerdict.RELEASE:
            for m in d.members:
                member = self.pod(m.pod.split("/")[1])
                self.cluster.apply({**member, "spec": {**member["spec"], "nodeName": m.node}})
            self.scheduler.release_done(d.gang, {m.pod: "" for m in d.members})

    def bound(self, *names: str) -> bool:
        return all(self.pod(n)["spec"].get("nodeName") for n in names)

    def tick(self) -> None:
        """What the ticker asks of the scheduler between calls."""
        self.scheduler.telling.quorum_arrived()
        self.scheduler.admission.holds_over()
        self.scheduler.telling.backoffs_over()
        self.scheduler.telling.startup_nudges()


def queue(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": {"gpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1}}},
    }


@pytest.mark.parametrize("depth", [1200, MAX_SUBGROUP_DEPTH + 1])
def test_a_gang_past_the_depth_limit_is_refused_and_unrelated_gangs_still_bind(depth):
    w = World([make_node("n1", cpu="64", memory="256Gi", gpu="8"), queue("team-a"), queue("team-b")])
    # two pods needed, one exists: it waits in team-b (below its fair share) for the same GPUs
    w.cluster.apply(make_kai_podgroup("deep", subgroups=chain(depth, leaf_min=2), queue="team-b"))
    leaf = f"sg{depth - 1}"
    w.cluster.apply(gang_pod("deep-0", "deep", gpu="4", labels={keys.SUBGROUP_NAME: leaf}))
    w.cluster.apply(make_kai_podgroup("ok", min_member=2, queue="team-a"))
    for i in range(2):
        w.cluster.apply(gang_pod(f"ok-{i}", "ok", gpu="4"))

    w.tick()
    # the unrelated gang is over its fair share (8 of 8 GPUs, team-b asks too): admission looks at
    # the other queue's waiting gangs, and the refused one is not among them
    w.schedule("ok-0", "ok-1")
    assert w.bound("ok-0", "ok-1")
    w.tick()
    refused = w.filter("deep-0")
    assert refused.verdict is Verdict.REJECTED
    assert f"at most {MAX_SUBGROUP_DEPTH} levels" in refused.reason and "spec.subGroups[" in refused.reason


def test_a_podgroup_listing_children_before_parents_plans_and_binds():
    w = World([make_node("n1")])
    subgroups = [
        {"name": "leaf", "parent": "mid", "minMember": 2},
        {"name": "mid", "parent": "top", "minSubGroup": 1},
        {"name": "top", "minSubGroup": 1},
    ]
    w.cluster.apply(make_kai_podgroup("any-order", subgroups=subgroups))
    for i in range(2):
        w.cluster.apply(gang_pod(f"any-order-{i}", "any-order", labels={keys.SUBGROUP_NAME: "leaf"}))
    w.schedule("any-order-0", "any-order-1")
    assert w.bound("any-order-0", "any-order-1")


@pytest.mark.parametrize("n_rjs", [10, 120])
def test_a_filter_derives_nothing_for_workloads_it_does_not_read(n_rjs, monkeypatch):
    nodes = [make_node(f"n{i}", cpu="64", memory="256Gi") for i in range(3)]
    w = World(nodes)
    big = jobset("big", n_rjs)
    jobs, pods = expand(big)
    for obj in (big, *jobs, *pods):
        w.cluster.apply(obj)
    w.cluster.apply(make_kai_podgroup("small", min_member=2))
    for i in range(2):
        w.cluster.apply(gang_pod(f"small-{i}", "small", cpu="100m", memory="64Mi"))
    counts = Counts(monkeypatch)

    w.schedule("small-0", "small-1")
    assert w.bound("small-0", "small-1")
    derived, trees = counts.take()
    assert trees == 0 and derived <= 6  # the small gang's own pods, whatever the JobSet's size

    # the JobSet's Jobs change one after another (their controller relabels them): each costs its
    # own pod, never a re-derivation of every pod at the next filter
    for job in jobs[: min(len(jobs), 10)]:
        obj = copy.deepcopy(w.cluster.get("batch", "Job", "default", job["metadata"]["name"]))
        obj["metadata"]["labels"]["touched"] = "1"
        w.cluster.apply(obj)
        w.filter(pods[0]["metadata"]["name"])
    derived, trees = counts.take()
    assert trees == 0 and derived <= 10 + 10 * 2

    names = [p["metadata"]["name"] for p in pods]
    w.schedule(*names)
    assert w.bound(*names)
    derived, trees = counts.take()
    assert trees == 0 and derived <= 3 * len(names)  # a pod's own changes (bound), not the tree's


def test_a_suspended_jobset_with_a_million_replicas_costs_the_podgrouper_no_tree(monkeypatch):
    store = ClusterStore()
    EmbeddedCluster([big_jobset(1_500_000)]).attach(store)
    _Counted.made = 0
    monkeypatch.setattr(kai, "SubGroup", _Counted)
    step = step_for((kai.JOBSET, "ml/huge"), store)
    assert step.action is Action.INVALID
    assert "spec.replicatedJobs[1].replicas" in step.message and "at most 10000" in step.message
    assert _Counted.made == 0


def _replicas_jobset(replicas: int, parallelism: int, anns: dict[str, str]) -> dict[str, Any]:
    pod_spec = {
        "schedulerName": "gang-scheduler",
        "containers": [{"name": "m", "resources": {"requests": {"cpu": "1"}}}],
    }
    template = {
        "metadata": {"annotations": anns},
        "spec": {"parallelism": parallelism, "template": {"spec": pod_spec}},
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "default", "uid": "train-uid"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas, "template": template}]},
    }


@pytest.mark.parametrize(
    ("anns", "tree_nodes", "demands"),
    [
        # no replica has a topology: its subgroups add nothing to the placement, one pool of members,
        # held to the nodes kube-scheduler offered the filtered pod (their terms are its own)
        ({}, 1, 1),
        # each replica in one rack: the root and a node per replica (`workers` itself has none)
        ({keys.TOPOLOGY: "dc", keys.TOPOLOGY_REQUIRED: "rack"}, 1 + 6, 6),
    ],
)
def test_a_jobsets_replicas_are_planned_as_one_pool_unless_each_has_a_topology(
    anns, tree_nodes, demands, monkeypatch
):
    from extender.scheduling import planning
    from extender.sim.cluster import topology

    js = _replicas_jobset(replicas=6, parallelism=2, anns=anns)
    jobs, pods = expand(js)
    nodes = [make_node(f"n{r}{i}", cpu="2", rack=f"r{r}", block="b0") for r in range(6) for i in range(2)]
    world = World([topology("dc"), *nodes, js, *jobs, *pods])
    seen: list[Any] = []
    gang_demand = planning.gang_demand

    def spy(*args: Any, **kw: Any) -> Any:
        demand = gang_demand(*args, **kw)
        seen.append(demand.request)
        return demand

    monkeypatch.setattr(planning, "gang_demand", spy)
    names = [p["metadata"]["name"] for p in pods]
    world.schedule(*names)
    assert world.bound(*names)
    request = seen[0]
    assert (len(request.tree), len(request.leaves)) == (tree_nodes, demands)
    assert sum(leaf.count for leaf in request.leaves) == len(names)
    if anns:  # every replica whole in one rack
        racks = {}
        for name in names:
            node = world.pod(name)["spec"]["nodeName"]
            racks.setdefault(name.rsplit("-", 1)[0], set()).add(node[1])
        assert all(len(r) == 1 for r in racks.values()), racks
