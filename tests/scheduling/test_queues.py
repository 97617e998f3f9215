"""Queues in the filter path: limits held with their numbers, fair-share holds, unknown queues, plain
pods counted, and nothing enforced where the cluster has no Queue objects.

The scheduler is driven directly over an embedded cluster, as the server drives it: a pod that
passes filter is bound (a gang's barrier releases when its last planned member arrives, and the
members are then shown bound).
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.model.labels import QUEUE, SUBGROUP_NAME
from extender.scheduling.decisions import BindVerdict, FilterDecision, Verdict
from extender.scheduling.ledger import GangLedger
from extender.scheduling.scheduler import Scheduler
from extender.state.embedded import EmbeddedCluster
from extender.state.store import ClusterStore
from tests.builders import controller_ref, gang_pod, make_job, make_kai_podgroup, make_node, make_pod


def kai_queue(name: str, parent: str | None = None, **resources: dict) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": resources}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


class World:
    def __init__(self, objects: list[dict[str, Any]], **kw: Any) -> None:
        self.store = ClusterStore()
        self.cluster = EmbeddedCluster(objects)
        self.cluster.attach(self.store)
        self.scheduler = Scheduler(self.store, self.ledger(clock=Clock()), **kw)

    def ledger(self, **kw: Any) -> GangLedger:
        """A ledger of this world's settings over its store, on its scheduler's clock unless `kw` says
        otherwise; `kw` adds or replaces settings."""
        settings: dict[str, Any] = dict(wait_s=5, hold_s=5, backoff_initial_s=2, backoff_max_s=60)
        if "clock" not in kw:
            settings["clock"] = self.scheduler.ledger.clock
        return GangLedger(self.store, **(settings | kw))

    def pod(self, name: str) -> dict[str, Any]:
        pod = self.cluster.get("", "Pod", "default", name)
        assert pod is not None
        return pod

    def filter(self, name: str) -> FilterDecision:
        return self.scheduler.filter(self.pod(name), sorted(self.store.node_rows))

    def schedule(self, *names: str) -> dict[str, FilterDecision]:
        """Filter each pod in turn and bind the ones that pass, as kube-scheduler would."""
        out = {}
        for name in names:
            decision = out[name] = self.filter(name)
            if decision.verdict is Verdict.PASS:
                self.bind(name, decision.passed[0])
        return out

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

    def gang(self, name: str, size: int, queue: str, gpu: str = "1") -> list[str]:
        self.cluster.apply(make_kai_podgroup(name, min_member=size, queue=queue))
        names = [f"{name}-{i}" for i in range(size)]
        for pod in names:
            self.cluster.apply(gang_pod(pod, name, cpu="100m", memory="64Mi", gpu=gpu))
        return names

    def bound(self, *names: str) -> bool:
        return all(self.pod(n)["spec"].get("nodeName") for n in names)


def gpu_nodes(n: int, gpus: int = 8) -> list[dict[str, Any]]:
    return [make_node(f"node-{i}", cpu="64", memory="256Gi", gpu=str(gpus)) for i in range(n)]


def test_a_gang_over_its_queue_limit_waits_with_the_numbers_and_goes_once_usage_drops() -> None:
    w = World([*gpu_nodes(4), kai_queue("team-a", gpu={"quota": 4, "limit": 12})])
    first = w.gang("first", 8, "team-a")
    w.schedule(*first)
    assert w.bound(*first)
    second = w.gang("second", 8, "team-a")
    decision = w.filter(second[0])
    assert decision.verdict is Verdict.WAITING
    assert decision.reason == "gang default/second: queue team-a: gpu limit 12, in use 8, gang needs 8"
    assert w.scheduler.describe("default/second")["queueHold"] == decision.reason.removeprefix(
        "gang default/second: "
    )
    held = w.scheduler.describe_queues()["queues"][0]
    assert held["resources"]["gpu"]["allocated"] == 8 and "default/second" in held["held"]
    assert w.scheduler.admission.holds_over() == []  # still over: nobody brought back
    # the first gang finishes: its usage is gone, the member turned away is brought back, and the
    # second gang is planned
    for name in first:
        w.cluster.delete("", "Pod", "default", name)
    nudged = w.scheduler.admission.holds_over()
    assert [(e.kind, e.name) for e in nudged] == [("nudge", "second-0")]
    w.schedule(*second)
    assert w.bound(*second)
    assert w.scheduler.describe("default/second")["queueHold"] is None


def test_a_parent_queue_limit_holds_its_children() -> None:
    w = World(
        [
            *gpu_nodes(4),
            kai_queue("org", gpu={"quota": 4, "limit": 10}),
            kai_queue("team-a", "org", gpu={"quota": 2, "limit": -1}),
            kai_queue("team-b", "org", gpu={"quota": 2, "limit": -1}),
        ]
    )
    w.schedule(*w.gang("a", 8, "team-a"))
    decision = w.filter(w.gang("b", 4, "team-b")[0])
    assert decision.reason == "gang default/b: queue org: gpu limit 10, in use 8, gang needs 4"
    # a parent queue takes no workloads
    decision = w.filter(w.gang("c", 1, "org")[0])
    assert decision.verdict is Verdict.WAITING and "only leaf queues take workloads" in decision.reason


def test_pods_of_the_default_scheduler_count_only_when_they_name_a_queue() -> None:
    system = make_pod("daemon", gpu="4", node="node-0")
    system["spec"]["schedulerName"] = "default-scheduler"
    labelled = make_pod("labelled", gpu="2", node="node-0", labels={"kai.scheduler/queue": "default-queue"})
    del labelled["spec"]["schedulerName"]  # the default scheduler's, unset
    w = World([*gpu_nodes(1), kai_queue("default-queue"), system, labelled])
    snap = w.scheduler.queue_snapshot()
    assert snap is not None and snap.allocated["default-queue"]["nvidia.com/gpu"] == 2


def test_plain_pods_count_against_their_queue() -> None:
    w = World([*gpu_nodes(1), kai_queue("team-a", gpu={"quota": 1, "limit": 2})])
    for i in range(3):
        w.cluster.apply(make_pod(f"p{i}", gpu="1", labels={"kai.scheduler/queue": "team-a"}))
    decisions = w.schedule("p0", "p1", "p2")
    assert [d.verdict for d in decisions.values()] == [Verdict.PASS, Verdict.PASS, Verdict.WAITING]
    assert decisions["p2"].reason == "pod default/p2: queue team-a: gpu limit 2, in use 2, pod needs 1"
    # a bound pod of the queue counts the same (a restart reads it from the cluster)
    w.cluster.delete("", "Pod", "default", "p0")
    assert w.schedule("p2")["p2"].verdict is Verdict.PASS


def test_a_pod_naming_a_queue_that_does_not_exist_waits_saying_to_create_it() -> None:
    w = World([*gpu_nodes(1), kai_queue("team-a")])
    w.cluster.apply(make_pod("p", labels={"kai.scheduler/queue": "team-x"}))
    decision = w.filter("p")
    assert decision.verdict is Verdict.WAITING
    assert "queue team-x does not exist: create a Queue named team-x" in decision.reason
    # no label: the default queue, which does not exist here either
    w.cluster.apply(make_pod("q"))
    assert "queue default-queue does not exist" in w.filter("q").reason
    # the default queue is configurable
    w2 = World([*gpu_nodes(1), kai_queue("team-a")], default_queue="team-a")
    w2.cluster.apply(make_pod("q"))
    assert w2.filter("q").verdict is Verdict.PASS
    # the PodGroup's spec.queue is authoritative over the pods' label
    w2.cluster.apply(make_kai_podgroup("g", min_member=1, queue="team-x"))
    w2.cluster.apply(gang_pod("g-0", "g", labels={"kai.scheduler/queue": "team-a"}))
    assert "queue team-x does not exist" in w2.filter("g-0").reason


@pytest.mark.parametrize("objects", [[], [make_kai_podgroup("other", queue="nowhere")]])
def test_without_queue_objects_nothing_is_enforced(objects: list[dict[str, Any]]) -> None:
    w = World([*gpu_nodes(1), *objects])
    w.cluster.apply(make_pod("p", gpu="8", labels={"kai.scheduler/queue": "team-x"}))
    assert w.filter("p").verdict is Verdict.PASS
    assert w.scheduler.describe_queues() == {"enforced": False, "defaultQueue": "default-queue", "queues": []}
    assert not w.scheduler.queue_book.tracking  # pod events are not even recorded
    # a Queue appears: every pod is counted from then on
    w.cluster.apply(kai_queue("team-x"))
    snap = w.scheduler.queue_snapshot()
    assert snap is not None and snap.requested["team-x"]["nvidia.com/gpu"] == 8
    w.cluster.delete("scheduling.run.ai", "Queue", None, "team-x")
    assert w.scheduler.queue_snapshot() is None and not w.scheduler.queue_book.groups


def test_an_over_share_gang_is_held_while_an_under_share_gang_waits_for_the_same_capacity() -> None:
    # 16 gpus; two queues with equal quota 4 and weight: fair share 8 each once both ask
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 4, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 4, "limit": -1}),
        ]
    )
    a1 = w.gang("a1", 12, "team-a")
    w.schedule(*a1)
    assert w.bound(*a1)  # alone, team-a may take more than its share
    big = w.gang("big", 8, "team-b")  # needs 8: only 4 free; team-b is below its share
    a2 = w.gang("a2", 2, "team-a")  # would fit in the 4 free gpus, but team-a is over its share
    decision = w.filter(a2[0])
    assert decision.verdict is Verdict.WAITING
    assert decision.reason == (
        "gang default/a2: queue team-a is at its fair share of gpu (12 in use + 2 needed > fair share 8) "
        "while default/big of queue team-b, below its fair share, waits for the same capacity: "
        "held so that queue team-b gets its share first"
    )
    assert w.scheduler.describe("default/a2")["queue"] == "team-a"
    # half of the first gang finishes: the big gang fits and goes; then a2 goes too
    for name in a1[:6]:
        w.cluster.delete("", "Pod", "default", name)
    w.schedule(*big)
    assert w.bound(*big)
    assert [(e.kind, e.name) for e in w.scheduler.admission.holds_over()] == [("nudge", "a2-0")]
    w.schedule(*a2)
    assert w.bound(*a2)


def test_a_holder_found_to_fit_nowhere_and_reclaim_nothing_holds_no_one() -> None:
    # as above, but the big gang has been tried: with 4 gpus free it fits nowhere, and it cannot reclaim
    # (team-a's one gang of 12 would fall to 0, below its quota): holding a2 would keep 4 gpus idle
    # for nobody (issue 21)
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 4, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 4, "limit": -1}),
        ]
    )
    w.schedule(*w.gang("a1", 12, "team-a"))
    big = w.gang("big", 8, "team-b")
    assert w.filter(big[0]).verdict is Verdict.NO_FIT
    a2 = w.gang("a2", 2, "team-a")
    w.schedule(*a2)
    assert w.bound(*a2)


def test_a_gang_whose_only_pending_pods_are_in_a_leaf_short_of_pods_holds_no_one() -> None:
    # team-b's gang is ready through leaf x (bound); its one pending pod is in leaf y, which needs 4
    # and has 1: that pod binds nothing whatever room is held, so team-a's a2 is not held for it
    # (the interleavings' seed 32)
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 4, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 4, "limit": -1}),
        ]
    )
    w.schedule(*w.gang("a1", 12, "team-a"))
    leaf = "kai.scheduler/subgroup-name"
    pg = make_kai_podgroup(
        "sg", queue="team-b", subgroups=[{"name": "x", "minMember": 2}, {"name": "y", "minMember": 4}]
    )
    pg["spec"]["minSubGroup"] = 1  # ready with either leaf
    w.cluster.apply(pg)
    for name, lf in (("sg-x0", "x"), ("sg-x1", "x"), ("sg-y0", "y")):
        w.cluster.apply(gang_pod(name, "sg", cpu="100m", memory="64Mi", gpu="1", labels={leaf: lf}))
    w.schedule("sg-x0", "sg-x1")
    assert w.bound("sg-x0", "sg-x1") and not w.bound("sg-y0")
    a2 = w.gang("a2", 2, "team-a")  # over team-a's share, and 2 gpus free: exactly a2's need
    decisions = w.schedule(*a2)
    assert w.bound(*a2), {n: d.reason for n, d in decisions.items()}


def _two_queues(a_quota: int = 4, b_quota: int = 4) -> World:
    return World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": a_quota, "limit": -1}),
            kai_queue("team-b", gpu={"quota": b_quota, "limit": -1}),
        ]
    )


def test_a_gang_ready_only_by_a_member_being_deleted_holds_no_one() -> None:
    # team-b's gang of quorum 3 has one member bound, one bound and stuck terminating (a finalizer),
    # and one pending: its filter counts 2 live members and waits for a third, so it binds nothing,
    # and team-a's a2, over its share, is not held for it (the book counted the terminating member)
    w = _two_queues()
    w.schedule(*w.gang("a1", 12, "team-a"))
    w.cluster.apply(make_kai_podgroup("b1", min_member=3, queue="team-b"))
    for i in range(3):
        w.cluster.apply(gang_pod(f"b1-{i}", "b1", cpu="100m", memory="64Mi", gpu="1"))
    w.schedule("b1-0", "b1-1", "b1-2")
    assert w.bound("b1-0", "b1-1", "b1-2")
    w.cluster.delete("", "Pod", "default", "b1-2")
    going = w.pod("b1-0")
    meta = {
        **going["metadata"],
        "deletionTimestamp": "2026-01-01T00:00:00Z",
        "finalizers": ["example.com/hold"],
    }
    w.cluster.apply({**going, "metadata": meta})
    w.cluster.apply(gang_pod("b1-3", "b1", cpu="100m", memory="64Mi", gpu="1"))
    assert w.filter("b1-3").reason == "gang default/b1 waiting for pods: 2 exist, 3 needed for quorum"
    a2 = w.gang("a2", 2, "team-a")  # over team-a's share (12 + 2); 2 gpus free, not the 3 both need
    decisions = w.schedule(*a2)
    assert w.bound(*a2), {n: d.reason for n, d in decisions.items()}


def test_a_gang_whose_members_are_all_being_deleted_keeps_its_tally_until_the_last_goes() -> None:
    # the members still use their queue's room, and count for nothing toward the quorum: the tally
    # stays while any is counted, and no count goes below zero as they go one by one
    w = _two_queues()
    names = w.gang("b1", 2, "team-b")
    w.schedule(*names)
    assert w.bound(*names)
    for name in names:
        pod = w.pod(name)
        meta = {
            **pod["metadata"],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["example.com/x"],
        }
        w.cluster.apply({**pod, "metadata": meta})
    tally = w.scheduler.admission.queue_snapshot().groups["default/b1"]
    assert (tally.pods, sum(tally.live.values()), tally.ready_leaves()) == (2, 0, None)
    w.cluster.delete("", "Pod", "default", names[0])
    tally = w.scheduler.admission.queue_snapshot().groups["default/b1"]
    assert (tally.pods, min(tally.live.values(), default=0)) == (1, 0)
    w.cluster.delete("", "Pod", "default", names[1])
    assert "default/b1" not in w.scheduler.admission.queue_snapshot().groups


def test_a_gang_ready_by_its_finished_members_holds_back_a_queue_over_its_share() -> None:
    # team-b's gang of quorum 3 has two members that ran to completion and one pending: its filter
    # counts the finished ones (as KAI does) and would place it, so the book counts it ready too, and
    # team-a's a2, over its share, waits while it takes its room
    w = _two_queues()
    w.schedule(*w.gang("a1", 12, "team-a"))
    w.cluster.apply(make_kai_podgroup("fin", min_member=3, queue="team-b"))
    for i in range(2):
        done = gang_pod(f"fin-{i}", "fin", cpu="100m", memory="64Mi", gpu="2")
        w.cluster.apply(
            {**done, "spec": {**done["spec"], "nodeName": "node-0"}, "status": {"phase": "Succeeded"}}
        )
    w.cluster.apply(gang_pod("fin-2", "fin", cpu="100m", memory="64Mi", gpu="4"))
    a2 = [f"a2-{i}" for i in range(2)]
    w.cluster.apply(make_kai_podgroup("a2", min_member=2, queue="team-a"))
    for name in a2:
        w.cluster.apply(gang_pod(name, "a2", cpu="100m", memory="64Mi", gpu="2"))
    decision = w.filter(a2[0])
    assert decision.verdict is Verdict.WAITING
    assert (
        "while default/fin of queue team-b, below its fair share, waits for the same capacity"
        in decision.reason
    )
    w.schedule("fin-2")
    assert w.bound("fin-2")


def test_a_gang_whose_members_beyond_quorum_fit_nowhere_in_its_rack_holds_no_one() -> None:
    # team-b's rack gang is bound whole in rack ra (node-0 full); its third member may go only there,
    # and its filter found no room: team-a's gang, over its share, is not held for it, and takes
    # node-1 (rack rb), where team-b's gang could never go
    from extender.sim.cluster import topology

    w = World(
        [
            make_node("node-0", cpu="64", memory="256Gi", gpu="8", rack="ra", block="b0"),
            make_node("node-1", cpu="64", memory="256Gi", gpu="8", rack="rb", block="b0"),
            topology("dc"),
            kai_queue("team-a", gpu={"quota": 4, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 12, "limit": -1}),
        ]
    )
    w.cluster.apply(
        make_kai_podgroup(
            "el", min_member=2, queue="team-b", topology={"topology": "dc", "requiredTopologyLevel": "rack"}
        )
    )
    for i in range(3):
        w.cluster.apply(gang_pod(f"el-{i}", "el", cpu="100m", memory="64Mi", gpu="4"))
    w.schedule("el-0", "el-1")
    assert w.bound("el-0", "el-1") and {w.pod(f"el-{i}")["spec"]["nodeName"] for i in (0, 1)} == {"node-0"}
    assert w.filter("el-2").verdict is Verdict.NO_FIT
    a1 = w.gang("a1", 7, "team-a")
    decisions = w.schedule(*a1)
    assert w.bound(*a1), {n: d.reason for n, d in decisions.items()}


def test_no_hold_when_there_is_room_for_both() -> None:
    # team-c asks for far more than the cluster: team-a is over its fair share (14), team-b below its
    # own, but 16 gpus are free: enough for team-a's 2 and team-b's 4, so no one is held
    w = World([*gpu_nodes(4), *(kai_queue(f"team-{t}", gpu={"quota": 4, "limit": -1}) for t in "abc")])
    w.schedule(*w.gang("a1", 16, "team-a"))
    w.gang("c", 40, "team-c")
    w.gang("b", 4, "team-b")  # waiting (never filtered)
    a2 = w.gang("a2", 2, "team-a")
    assert w.scheduler.queue_snapshot().fair_share["team-a"]["nvidia.com/gpu"] == 14
    w.schedule(*a2)
    assert w.bound(*a2)


async def test_debug_queues_metrics_and_explain_show_a_held_gang(make_service) -> None:
    from extender import cli

    svc = await make_service(
        [*gpu_nodes(1), kai_queue("team-a", gpu={"quota": 1, "limit": 2}, cpu={"quota": -1, "limit": -1})],
        gang_default_queue="team-a",
    )
    svc.cluster.apply(make_kai_podgroup("big", min_member=3, queue="team-a"))
    for i in range(3):
        svc.cluster.apply(gang_pod(f"big-{i}", "big", gpu="1"))
    doc = await svc.filter("big-0")
    assert doc["NodeNames"] == []
    queues = (await (await svc.client.get("/debug/queues")).json())["queues"]
    (team,) = queues
    assert (
        team["queue"] == "team-a"
        and team["leaf"]
        and team["held"] == {"default/big": "queue team-a: gpu limit 2, in use 0, gang needs 3"}
    )
    assert team["resources"]["gpu"] == {
        "quota": 1,
        "limit": 2,
        "overQuotaWeight": 1.0,
        "allocated": 0,
        "leaving": 0,
        "requested": 3,
        "fairShare": 2,
    }
    assert team["resources"]["cpu"]["limit"] is None  # -1: no limit
    metrics = await (await svc.client.get("/metrics")).text()
    assert 'gang_extender_queue_requested{queue="team-a",resource="gpu"} 3.0' in metrics
    assert 'gang_extender_queue_fair_share{queue="team-a",resource="gpu"} 2.0' in metrics
    assert 'gang_extender_queue_allocated{queue="team-a",resource="gpu"} 0.0' in metrics
    described = await (await svc.client.get("/debug/gangs/default/big")).json()
    text = cli.render_gang(described)
    assert "Queue:       team-a" in text
    assert "Held:        queue team-a: gpu limit 2, in use 0, gang needs 3" in text


def test_the_default_queue_setting_is_a_flag_with_an_environment_twin(monkeypatch) -> None:
    import argparse

    from extender import cli
    from extender.config import default_settings, validate

    monkeypatch.setenv("GANG_EXTENDER_DEFAULT_QUEUE", "research")
    settings, errors = cli.settings_from(argparse.Namespace(), cli.SERVE_FLAGS)
    assert not errors and settings.gang.default_queue == "research"
    assert validate(default_settings(gang_default_queue=" ")) == [
        "--default-queue must name a queue, got an empty name"
    ]


async def test_queue_status_says_allocated_and_requested_and_is_written_only_when_it_changes(
    make_service,
) -> None:
    svc = await make_service(
        [
            *gpu_nodes(1),
            kai_queue("org", gpu={"quota": -1, "limit": -1}),
            kai_queue("team-a", "org", gpu={"quota": 2, "limit": -1}),
            make_pod("run", gpu="2", labels={"kai.scheduler/queue": "team-a"}, node="node-0"),
            make_pod("wait", cpu="500m", gpu="1", labels={"kai.scheduler/queue": "team-a"}),
        ]
    )
    await svc.expire(0.1)
    team = svc.cluster.get("scheduling.run.ai", "Queue", None, "team-a")["status"]
    assert team["allocated"] == {"cpu": "1000m", "memory": str(2**30), "nvidia.com/gpu": "2"}
    assert team["requested"] == {"cpu": "1500m", "memory": str(2 * 2**30), "nvidia.com/gpu": "3"}
    # the parent counts its children
    assert svc.cluster.get("scheduling.run.ai", "Queue", None, "org")["status"] == team
    svc.clock.now += 5.1  # past the interval, without the ticker
    assert svc.scheduler.admission.queue_status() == []  # nothing changed: nothing written
    svc.cluster.delete("", "Pod", "default", "wait")
    await svc.expire(5.1)
    team = svc.cluster.get("scheduling.run.ai", "Queue", None, "team-a")["status"]
    assert team["requested"]["nvidia.com/gpu"] == "2"


def test_the_book_kept_event_by_event_agrees_with_one_counted_afresh() -> None:
    import random

    from extender.scheduling.queues import QueueBook

    rng = random.Random(7)
    w = World([*gpu_nodes(3), kai_queue("team-a"), kai_queue("team-b")])
    book = w.scheduler.queue_book
    for step in range(300):
        op = rng.choice(["pod", "gang", "bind", "delete", "relabel", "hold", "unhold", "gate", "terminate"])
        names = sorted(p["metadata"]["name"] for p in w.cluster.list("", "Pod"))
        queue = rng.choice(["team-a", "team-b", "team-x"])
        if op == "pod":
            w.cluster.apply(make_pod(f"p{step}", gpu="1", labels={"kai.scheduler/queue": queue}))
        elif op == "gang":
            w.cluster.apply(make_kai_podgroup(f"g{step}", min_member=2, queue=queue))
            for i in range(rng.randint(1, 3)):
                w.cluster.apply(gang_pod(f"g{step}-{i}", f"g{step}", gpu="1"))
        elif names and op in ("bind", "delete", "relabel", "gate", "terminate"):
            pod = w.pod(rng.choice(names))
            if op == "bind":
                w.cluster.apply({**pod, "spec": {**pod["spec"], "nodeName": "node-1"}})
            elif op == "delete":
                w.cluster.delete("", "Pod", "default", pod["metadata"]["name"])
            elif op == "terminate":
                meta = {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}
                w.cluster.apply({**pod, "metadata": meta})
            elif op == "relabel":
                labels = {"kai.scheduler/queue": queue}
                w.cluster.apply({**pod, "metadata": {**pod["metadata"], "labels": labels}})
            else:
                w.cluster.apply({**pod, "spec": {**pod["spec"], "schedulingGates": [{"name": "x"}]}})
        elif names and op == "hold":
            name = rng.choice(names)
            w.store.hold(f"default/{name}", "node-2", {"nvidia.com/gpu": 1})
        elif w.store.reservations and op == "unhold":
            w.store.unhold(rng.choice(sorted(w.store.reservations)))
        if step % 10 == 0:
            kept, fresh = book.snapshot(()), QueueBook(w.store, "default-queue").snapshot(())
            assert kept is not None and fresh is not None
            assert (kept.allocated, kept.leaving, kept.requested, kept.fair_share, kept.unknown) == (
                fresh.allocated,
                fresh.leaving,
                fresh.requested,
                fresh.fair_share,
                fresh.unknown,
            ), step
            for r in ("cpu", "nvidia.com/gpu"):
                kept_waiters, fresh_waiters = (
                    sorted(snap.waiters(r, besides=""), key=lambda h: h.group) for snap in (kept, fresh)
                )
                assert kept_waiters == fresh_waiters, step


def test_two_pods_that_passed_filter_within_the_limit_only_one_fits_are_not_both_bound() -> None:
    """kube-scheduler filters the next pod before the previous one's bind call arrives."""
    w = World([*gpu_nodes(1), kai_queue("team-a", gpu={"quota": 1, "limit": 1})])
    for name in ("p0", "p1"):
        w.cluster.apply(make_pod(name, gpu="1", labels={"kai.scheduler/queue": "team-a"}))
    assert w.filter("p0").verdict is w.filter("p1").verdict is Verdict.PASS
    binds = [
        w.scheduler.bind(namespace="default", name=n, uid=w.pod(n)["metadata"]["uid"], node="node-0")
        for n in ("p0", "p1")
    ]
    assert [b.verdict for b in binds] == [BindVerdict.NOW, BindVerdict.REFUSE]
    assert binds[1].message == "pod default/p1: queue team-a: gpu limit 1, in use 1, pod needs 1"


def two_teams(quota_a: int) -> World:
    return World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": quota_a, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 8, "limit": -1}),
        ]
    )


def test_a_queue_below_its_fair_share_reclaims_a_whole_gang_of_a_queue_over_its_own() -> None:
    w = two_teams(quota_a=8)
    for name in ("a1", "a2"):
        members = w.gang(name, 8, "team-a")
        w.schedule(*members)
        assert w.bound(*members)  # alone, team-a takes the whole cluster
    b = w.gang("b", 8, "team-b")
    decision = w.filter(b[0])
    assert decision.verdict is Verdict.WAITING
    evicted = [e for e in decision.effects if e.kind == "evict"]
    (victim,) = {e.data["gang"] for e in evicted}  # one gang, whole
    assert sorted(e.name for e in evicted) == [f"{victim.split('/')[1]}-{i}" for i in range(8)]
    assert decision.reason == (
        f"gang default/b: queue team-b is below its fair share: reclaiming 1 gang(s) ({victim}) from "
        "queue(s) team-a over theirs; waiting for them to go"
    )
    assert "reclaimed for gang default/b of queue team-b" in evicted[0].data["reason"]
    for e in evicted:
        w.cluster.delete("", "Pod", "default", e.name)
    w.schedule(*b)
    assert w.bound(*b)


def test_a_reclaim_never_takes_a_queue_below_its_quota() -> None:
    # team-a runs one gang of 24 gpus: evicting it (the only way to free 8) would leave it at 0, below
    # its quota of 12, though team-b (fair share 8) is below its share
    w = World(
        [
            *gpu_nodes(3),
            kai_queue("team-a", gpu={"quota": 12, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 8, "limit": -1}),
        ]
    )
    w.schedule(*w.gang("a", 24, "team-a"))
    decision = w.filter(w.gang("b", 8, "team-b")[0])
    assert decision.verdict is Verdict.NO_FIT
    assert not [e for e in decision.effects if e.kind == "evict"]
    assert w.scheduler.queue_snapshot().fair_share["team-b"]["nvidia.com/gpu"] == 8


def test_a_gang_its_own_parents_limit_holds_holds_no_one() -> None:
    # team-b2 is within its fair share, but its parent's limit stops its gang (team-b1 uses 6 of org-b's
    # 8): team-a's gang is not held for it
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 4, "limit": -1}),
            kai_queue("org-b", gpu={"quota": 4, "limit": 8}),
            kai_queue("team-b1", "org-b", gpu={"quota": 0, "limit": -1}),
            kai_queue("team-b2", "org-b", gpu={"quota": 4, "limit": -1}),
        ]
    )
    w.schedule(*w.gang("b1", 6, "team-b1"))
    w.schedule(*w.gang("a1", 8, "team-a"))
    b2 = w.gang("b2", 4, "team-b2")
    assert w.filter(b2[0]).reason == "gang default/b2: queue org-b: gpu limit 8, in use 6, gang needs 4"
    a2 = w.gang("a2", 2, "team-a")
    snap = w.scheduler.queue_snapshot()
    assert snap.fair_share["team-b2"]["nvidia.com/gpu"] == 4  # b2 is within its share...
    assert snap.fair_share["team-a"]["nvidia.com/gpu"] == 8  # ...and a2 takes team-a past its own
    w.schedule(*a2)
    assert w.bound(*a2)


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def test_a_gang_kube_scheduler_never_brings_here_is_taken_to_reclaim_by_the_tick() -> None:
    # every node full with team-a's 8-gpu pods: team-b's 8-gpu pods fit no node, so kube-scheduler's own
    # filters fail before the extender is asked, and at priority 0 it never calls the preempt verb
    w = World(
        [
            *gpu_nodes(4),
            kai_queue("team-a", gpu={"quota": 16, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 16, "limit": -1}),
        ]
    )
    for name in ("a1", "a2"):
        members = w.gang(name, 2, "team-a", gpu="8")
        w.schedule(*members)
        assert w.bound(*members)
    b = w.gang("b", 2, "team-b", gpu="8")
    assert w.scheduler.gang_preemption.reclaims_tick() == [], "not before kube-scheduler has tried and failed"
    for name in b:
        w.cluster.apply({**w.pod(name), "status": {"conditions": [UNSCHEDULABLE]}})
    evicted = [e for e in w.scheduler.gang_preemption.reclaims_tick() if e.kind == "evict"]
    (victim,) = {e.data["gang"] for e in evicted}
    assert sorted(e.name for e in evicted) == [f"{victim.split('/')[1]}-{i}" for i in range(2)], "whole"
    assert "reclaimed for gang default/b of queue team-b" in evicted[0].data["reason"]
    w.scheduler.ledger.clock.now += 60
    assert w.scheduler.gang_preemption.reclaims_tick() == [], "a reclaim under way is not started again"
    for e in evicted:
        w.cluster.delete("", "Pod", "default", e.name)
    w.schedule(*b)
    assert w.bound(*b)


def test_the_reclaim_tick_looks_at_a_gang_at_most_every_few_seconds() -> None:
    # team-b's gang is within its fair share (8 of 16 gpus), but the only victim, team-a's one gang,
    # cannot go: team-a would fall below its quota
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 8, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 8, "limit": -1}),
        ]
    )
    w.schedule(*w.gang("a", 2, "team-a", gpu="8"))
    b = w.gang("b", 2, "team-b", gpu="4")
    for name in b:
        w.cluster.apply({**w.pod(name), "status": {"conditions": [UNSCHEDULABLE]}})
    looks: list[str] = []
    original = w.scheduler.gang_preemption._plan_everywhere
    w.scheduler.gang_preemption._plan_everywhere = lambda pod: (
        looks.append(pod["metadata"]["name"]) or original(pod)
    )
    clock = w.scheduler.ledger.clock
    for _ in range(3):
        assert [e for e in w.scheduler.gang_preemption.reclaims_tick() if e.kind == "evict"] == []
        clock.now += 1
    assert looks == ["b-0"]
    clock.now += 5
    w.scheduler.gang_preemption.reclaims_tick()
    assert looks == ["b-0", "b-0"]


def test_with_queues_a_high_priority_gang_preempts_within_its_own_queue_only() -> None:
    # team-b's gang is the cheapest victim by priority (50), but it is another queue's, within its quota:
    # across queues only a reclaim evicts; the preemptor takes its own queue's priority-100 gang
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 8, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 8, "limit": -1}),
        ]
    )

    def gang_at(name: str, queue: str, priority: int) -> list[str]:
        members = w.gang(name, 2, queue, gpu="4")
        for m in members:
            pod = w.pod(m)
            w.cluster.apply({**pod, "spec": {**pod["spec"], "priority": priority}})
        return members

    for name, queue, priority in (("b-low", "team-b", 50), ("a-low", "team-a", 100)):
        members = gang_at(name, queue, priority)
        w.schedule(*members)
        assert w.bound(*members)
    urgent = gang_at("urgent", "team-a", 1000)
    decision = w.filter(urgent[0])
    evicted = {e.data["gang"] for e in decision.effects if e.kind == "evict"}
    assert evicted == {"default/a-low"}, (decision.reason, evicted)


def test_a_gang_that_holds_other_queues_back_is_found_to_fit_nowhere_through_a_leaf_it_can_bind() -> None:
    """Seed 1104 of the harness: team-b's gang, within its share, holds team-a's pods back for the room
    its pending members need. Its leaf b is bound at its quorum and has one more member, which fits no
    node; its leaf a is one pod short. The tick took the gang through a's member, was told it waits
    for pods, and never found the gang could use no room: team-a's pod waited for ever beside free
    room. The tick now looks through a member of a leaf the book counts the gang's need by."""
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 0, "limit": -1, "overQuotaWeight": 0}),
            kai_queue("team-b", gpu={"quota": 16, "limit": -1}),
        ]
    )
    group = make_kai_podgroup("sub", subgroups=[{"name": "a", "minMember": 2}, {"name": "b", "minMember": 1}])
    group["spec"]["queue"], group["spec"]["minSubGroup"] = "team-b", 1
    w.cluster.apply(group)

    def member(name: str, leaf: str, gpu: str) -> str:
        pod = gang_pod(name, "sub", cpu="100m", memory="64Mi", gpu=gpu, labels={SUBGROUP_NAME: leaf})
        w.cluster.apply(pod)
        return name

    w.schedule(member("sub-b0", "b", "1"))
    assert w.bound("sub-b0")
    short = member("sub-a0", "a", "1")  # a's only pod: a needs two
    huge = member("sub-b1", "b", "15")  # beyond b's quorum; no node has 15 gpus, the cluster has
    for name in (short, huge):
        w.cluster.apply({**w.pod(name), "status": {"conditions": [UNSCHEDULABLE]}})
    w.cluster.apply(make_pod("a-0", cpu="100m", memory="64Mi", gpu="1", labels={QUEUE: "team-a"}))
    held = w.filter("a-0")
    assert held.verdict is not Verdict.PASS and "default/sub of queue team-b" in held.reason, held.reason
    w.scheduler.gang_preemption.reclaims_tick()
    passed = w.filter("a-0")
    assert passed.verdict is Verdict.PASS, passed.reason


def test_the_running_pods_of_a_job_deleted_in_the_background_keep_their_podgroups_queue() -> None:
    """A Job deleted in the background (its pods the garbage collector's, still running) whose pods
    name the PodGroup KAI's podgrouper made for it: they stay charged to that PodGroup's queue, not
    the default one, where they would refuse the default queue's gang (found by review, when pods
    naming the PodGroup of a missing Job waited: running ones too)."""
    job = make_job(
        "train", parallelism=8, min_member=8, uid="u-train", labels={"kai.scheduler/queue": "team-a"}
    )
    pg = make_kai_podgroup("pg-train-u-train", min_member=8, queue="team-a")
    pg["metadata"]["ownerReferences"] = [controller_ref(job)]
    pods = [
        make_pod(
            f"train-{i}",
            owner=job,
            cpu="100m",
            memory="64Mi",
            gpu="1",
            annotations={"pod-group-name": "pg-train-u-train"},
            node=f"node-{i % 4}",
        )
        for i in range(8)
    ]
    for p in pods:
        p["status"]["phase"] = "Running"
    w = World(
        [
            *gpu_nodes(4),
            kai_queue("team-a", gpu={"quota": 8, "limit": 12}),
            kai_queue("default-queue", gpu={"quota": 4, "limit": 4}),
            job,
            pg,
            *pods,
        ]
    )
    w.cluster.apply(make_kai_podgroup("d", min_member=4, queue="default-queue"))
    for i in range(4):
        w.cluster.apply(
            make_pod(f"d-{i}", cpu="100m", memory="64Mi", gpu="1", annotations={"pod-group-name": "d"})
        )
    w.cluster.delete("batch", "Job", "default", "train")
    w.scheduler.queue_snapshot()
    assert w.scheduler.queue_book.charged_to("default/train-0") == "team-a"
    decision = w.filter("d-0")
    assert decision.verdict is not Verdict.WAITING or "queue" not in decision.reason, decision.reason


def test_a_plain_pod_held_for_its_queue_is_shown_and_explained_by_its_own_name() -> None:
    """A plain pod's group of one has a key of its own (`ns/pod:NAME`, never a PodGroup's): an
    operator still reads "pod ns/NAME" in /debug/queues, `explain ns/NAME` finds it, and its nudge
    names the pod (found by review of that key)."""
    w = World([*gpu_nodes(1), kai_queue("team-a", gpu={"quota": 1, "limit": 2})])
    for i in range(3):
        w.cluster.apply(make_pod(f"p{i}", gpu="1", labels={QUEUE: "team-a"}))
    d = w.schedule("p0", "p1", "p2")
    assert d["p2"].verdict is Verdict.WAITING
    (team_a,) = w.scheduler.describe_queues()["queues"]
    assert list(team_a["held"]) == ["pod default/p2"], team_a["held"]
    shown = w.scheduler.describe("default/p2")
    assert shown is not None and [m["pod"] for m in shown["members"]] == ["default/p2"], shown
    w.cluster.delete("", "Pod", "default", "p0")
    effects = w.scheduler.admission.holds_over()
    assert [(e.name, e.data) for e in effects] == [("p2", {"value": "default/p2:queue"})], effects


def test_the_fair_share_reason_names_a_plain_pod_waiting_below_its_share_as_a_pod() -> None:
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 4, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 4, "limit": -1}),
        ]
    )
    a1 = w.gang("a1", 12, "team-a")
    w.schedule(*a1)
    assert w.bound(*a1)
    w.cluster.apply(make_pod("big", gpu="4", labels={QUEUE: "team-b"}))
    d = w.filter(w.gang("a2", 2, "team-a")[0])
    assert d.verdict is Verdict.WAITING and "while pod default/big of queue team-b" in d.reason, d.reason


def test_the_order_the_book_first_sees_gangs_in_does_not_follow_the_hash_seed() -> None:
    """The reclaim pass plans ready gangs, and fair share looks at waiters, in the order the queue
    book first saw them: pods counted in one pass (all of them, after a start) are taken in name
    order, not a set's, which differs from process to process (a seed of the interleavings harness
    did not replay: two gangs took each other's nodes)."""
    import os
    import subprocess
    import sys

    script = (
        "from tests.scheduling.test_queues import World, gpu_nodes, kai_queue\n"
        "w = World([*gpu_nodes(2), kai_queue('team-a', gpu={'quota': 4, 'limit': -1})])\n"
        "for name in ('zeta', 'alpha', 'mid', 'beta', 'omega', 'kappa'):\n"
        "    w.gang(name, 2, 'team-a')\n"
        "w.scheduler.queue_snapshot()\n"
        "print(list(w.scheduler.queue_book.groups))\n"
    )
    orders = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(orders) == 1, orders
    (order,) = orders
    assert order.index("default/alpha") < order.index("default/beta") < order.index("default/zeta"), order
