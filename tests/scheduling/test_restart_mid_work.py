"""A restart (a new process over the same API objects), or the Lease moving to another replica, in
the middle of multi-step work: a preemption or a reclaim whose victims are still going, a hold for a
waiting gang. The new process evicts no second set of victims and holds what the first held.

A preempt verb's answer kube-scheduler acts on is read again from the API: a pod nominated to a node
where a pod of lower priority is still Terminating has room coming there.

Left (not rebuilt from the API): the room of victims already gone, held for their preemptor by the
first process, is free to anyone after a restart."""

from __future__ import annotations

from tests.builders import gang_pod, make_kai_podgroup
from tests.scheduling.test_preemptor import (
    FULL_R01,
    cluster,
    preemptor,
    settle,
    victim_gang,
)


class GraceEvictions:
    """An eviction as the API + kubelet do it: some victims get a deletionTimestamp and stay
    (Terminating, in grace, still bound), the others are deleted at once."""

    def __init__(self, cluster, terminate: set[str]) -> None:
        self.cluster = cluster
        self.terminate = terminate
        self.calls: list[str] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(f"{namespace}/{name}")
        pod = self.cluster.get("", "Pod", namespace, name)
        if pod is None or (uid and pod["metadata"].get("uid") != uid):
            return True
        if name in self.terminate:
            pod["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
            pod["metadata"]["deletionGracePeriodSeconds"] = 30
            self.cluster.apply(pod)
        else:
            self.cluster.delete("", "Pod", namespace, name)
        return True


async def restart(make_service, old, **settings):
    """A new process over the same API objects (the old one's memory is lost)."""
    await old.client.close()
    return await make_service(old.cluster.all_objects(), **settings)


# ------------------------------------------------------------------ 1: preemption mid-way
async def test_restart_mid_preemption_evicts_no_second_set_of_victims(make_service):
    """hi preempts lo (r00); lo-1 is gone, lo-0 is Terminating in its grace period. The first process
    waits for lo-0. A restarted one must not evict x and y in r01 (a second set of victims)."""
    first = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    first.cluster.evict_pod = GraceEvictions(first.cluster, {"lo-0"})
    await first.filter("hi-0")
    await settle()
    assert first.scheduler.ledger.preemption("default/hi") is not None
    assert first.pod("lo-1") is None and first.pod("lo-0")["metadata"].get("deletionTimestamp")
    # the first process, asked again, waits
    doc = await first.filter("hi-0")
    assert not doc["NodeNames"]
    assert first.pod("x") is not None and first.pod("y") is not None

    second = await restart(make_service, first)
    ev = GraceEvictions(second.cluster, set())
    second.cluster.evict_pod = ev
    for name in ("hi-0", "hi-1"):
        await second.filter(name, ["n001"])  # kube-scheduler's own filters pass the one free node
    await settle()
    assert ev.calls == [], f"a restarted process evicted a second set of victims: {ev.calls}"


class BudgetEvictions:
    """lo-0 goes into its grace period (Terminating); a PodDisruptionBudget refuses the others (429)."""

    def __init__(self, cluster, refuse: set[str]) -> None:
        self.cluster = cluster
        self.refuse = refuse
        self.calls: list[str] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(f"{namespace}/{name}")
        if name in self.refuse:
            return False
        pod = self.cluster.get("", "Pod", namespace, name)
        if pod is not None:
            pod["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
            pod["metadata"]["deletionGracePeriodSeconds"] = 30
            self.cluster.apply(pod)
        return True


async def test_restart_mid_preemption_with_a_budget_refused_victim_evicts_no_second_set(make_service):
    """hi preempts lo in r00: lo-0 Terminating, lo-1's eviction refused for now by a budget (it
    carries our DisruptionTarget condition, written first). The first process waits and asks lo-1
    again. The restarted one knows nothing of the preemption: its whole-gang disruption takes lo-1
    as its own (lo is below its quorum) and asks it until it goes. hi must not take x and y in r01
    as well: lo-1's room is on its way, read from the mark on the pod (found by a review: the
    restarted process counted neither lo-1 as a victim nor its room as coming)."""
    first = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    first.cluster.evict_pod = BudgetEvictions(first.cluster, {"lo-1"})
    await first.filter("hi-0")
    await settle()
    assert first.scheduler.ledger.preemption("default/hi") is not None
    cond = [c for c in first.pod("lo-1")["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert cond and first.pod("lo-0")["metadata"].get("deletionTimestamp")
    doc = await first.filter("hi-0")
    assert not doc["NodeNames"] and first.pod("x") is not None

    second = await restart(make_service, first)
    ev = BudgetEvictions(second.cluster, {"lo-1"})
    second.cluster.evict_pod = ev
    await second.expire(0.1)  # the new process's first ticks (whole-gang disruption looks at lo)
    await settle()
    for name in ("hi-0", "hi-1"):
        await second.filter(name)
    await settle()
    others = [c for c in ev.calls if c not in ("default/lo-0", "default/lo-1")]
    assert others == [], f"a restarted process evicted a second set of victims for hi: {ev.calls}"
    assert second.pod("x") is not None and second.pod("y") is not None


# ------------------------------------------------------------------ 3: reclaim mid-way
from tests.scheduling.test_queues import World, gpu_nodes, kai_queue  # noqa: E402

DELETING = "2026-01-01T00:00:00Z"


def _evicted(decision) -> list[str]:
    return sorted(e.name for e in decision.effects if e.kind == "evict")


def _terminating(w, name: str) -> None:
    pod = w.pod(name)
    w.cluster.apply({**pod, "metadata": {**pod["metadata"], "deletionTimestamp": DELETING}})


def test_restart_mid_reclaim_reclaims_no_second_set() -> None:
    w = World(
        [
            *gpu_nodes(6),
            kai_queue("team-a", gpu={"quota": 16, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 0, "limit": -1}),
            kai_queue("team-c", gpu={"quota": 0, "limit": -1}),
        ]
    )
    for q in ("b", "c"):
        for i in range(3):
            members = w.gang(f"{q}{i}", 1, f"team-{q}", gpu="8")
            w.schedule(*members)
            assert w.bound(*members)
    first = w.filter(w.gang("a1", 2, "team-a", gpu="8")[0])
    victims = _evicted(first)
    assert len(victims) == 2, (first.verdict, first.reason)
    # one victim went, the other runs out its grace period; the first process waits
    w.cluster.delete("", "Pod", "default", victims[0])
    _terminating(w, victims[1])
    again = w.filter("a1-0")
    assert _evicted(again) == [], again.reason
    # a new process over the same objects
    w2 = World(w.cluster.all_objects())
    second = w2.filter("a1-0")
    assert _evicted(second) == [], (
        f"first reclaim took {victims}, the restarted one takes {_evicted(second)} too"
    )


# ------------------------------------------------------------------ 5: a hold for a waiting gang
from extender.sim.cluster import topology as _topology  # noqa: E402
from tests.builders import rack_cluster  # noqa: E402

RACK = {"topology": "dc", "requiredTopologyLevel": "rack"}


def _rack_gang(name: str, size: int, cpu: str, *, node_of=None, prio: int = 0) -> list[dict]:
    objs = [make_kai_podgroup(name, min_member=size, topology=RACK)]
    for i in range(size):
        pod = gang_pod(f"{name}-{i}", name, cpu=cpu, memory="1Gi")
        pod["spec"]["priority"] = prio
        if node_of is not None:
            pod["spec"]["nodeName"] = node_of(i)
            pod["status"] = {"phase": "Running"}
        objs.append(pod)
    return objs


def _park(svc, names) -> None:
    for name in names:
        pod = svc.pod(name)
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/8 nodes"}
        svc.cluster.apply({**pod, "status": {**(pod.get("status") or {}), "conditions": [cond]}})


async def test_restart_keeps_the_hold_of_a_waiting_gang_from_the_first_filter(make_service):
    objs = [
        _topology("dc"),
        *rack_cluster(racks=2, nodes_per_rack=4, cpu="8"),
        # a: 12 cpu in rack r00 (n000 full, n001 half); b: 24 cpu in rack r01
        *_rack_gang("a", 3, "4", node_of=lambda i: ["n000", "n000", "n001"][i], prio=100),
        *_rack_gang("b", 6, "4", node_of=lambda i: f"n01{i // 2}", prio=100),
        *_rack_gang("big", 4, "8"),
        *_rack_gang("c", 4, "4"),
    ]
    first = await make_service(objs)
    doc = await first.filter("big-0")
    assert not doc["NodeNames"]
    _park(first, [f"big-{i}" for i in range(4)])
    await first.expire(1.5)
    hold = first.scheduler.describe("default/big")["hold"]
    assert hold is not None and hold.get("domain") == "rack r00", hold
    doc = await first.filter("c-0")
    assert not doc["NodeNames"] and first.plan("default/c") == {}

    second = await restart(make_service, first)
    doc = await second.filter("c-0")  # kube-scheduler's first call to the new process
    assert second.plan("default/c") == {}, (
        f"c was planned onto rack r00, held for big by the first process: {second.plan('default/c')}"
    )


# ------------------------------------------------------------------ 7: two replicas, the Lease moves
import time  # noqa: E402

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from extender.config import default_settings  # noqa: E402
from extender.server.app import build_app  # noqa: E402
from extender.state.embedded import EmbeddedCluster  # noqa: E402
from tests.scheduling.conftest import FakeClock, Service  # noqa: E402
from tests.scheduling.test_leadership import lease  # noqa: E402


def _live_lease(holder: str) -> dict:
    return lease(holder, renewed=time.time())


async def _replica(cluster: EmbeddedCluster, identity: str) -> Service:
    settings = default_settings(
        gang_wait_s=5.0,
        gang_hold_s=5.0,
        cluster_leader_lease="kube-system/gang-scheduler",
        cluster_leader_identity=identity,
    )
    cluster.bind_fence_s = 0.0
    clock = FakeClock()
    app = build_app(settings, source=cluster, clock=clock)
    client = TestClient(TestServer(app))
    await client.start_server()
    return Service(client, cluster, clock)


async def test_the_lease_moving_mid_preemption_evicts_no_second_set(make_service):
    objs = [
        *cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()),
        _live_lease("replica-a_1"),
    ]
    api = EmbeddedCluster(objs)  # replica a's watch is the API itself
    mirror = EmbeddedCluster(api.all_objects())  # replica b's watch of the same API

    def follow(event: str, obj: dict) -> None:
        meta = obj["metadata"]
        group = obj["apiVersion"].rpartition("/")[0] if "/" in obj["apiVersion"] else ""
        if event == "DELETED":
            mirror.delete(group, obj["kind"], meta.get("namespace"), meta["name"])
        else:
            mirror.apply(obj)

    api.add_listener(follow)
    a = await _replica(api, "replica-a")
    b = await _replica(mirror, "replica-b")
    try:
        api.evict_pod = GraceEvictions(api, {"lo-0"})
        await a.filter("hi-0")
        await settle()
        assert a.scheduler.ledger.preemption("default/hi") is not None
        assert (
            api.get("", "Pod", "default", "lo-1") is None and mirror.get("", "Pod", "default", "lo-1") is None
        )
        # kube-scheduler b takes the Lease: it now calls replica b
        api.apply(_live_lease("replica-b_1"))
        await b.expire(0.1)
        ev = GraceEvictions(mirror, set())
        mirror.evict_pod = ev
        for name in ("hi-0", "hi-1"):
            await b.filter(name, ["n001"])
        await settle()
        assert ev.calls == [], f"the new leader evicted a second set of victims: {ev.calls}"
    finally:
        await a.client.close()
        await b.client.close()


# ------------------------------------------------------------------ 6: kube-scheduler's preemption in flight
import orjson  # noqa: E402

from extender.scheduling.lagging import RETRY_TEXT  # noqa: E402
from tests.builders import make_node, make_pod  # noqa: E402


def _gpu_pod(name: str, priority: int, node: str | None = None) -> dict:
    pod = make_pod(name, cpu="1", gpu="1", node=node)
    pod["spec"]["priority"] = priority
    if node:
        pod["status"] = {"phase": "Running"}
    return pod


async def _preemptor_refused_on_its_node(svc) -> dict:
    """kube-scheduler's cache saw the victim go (this one has it Terminating): it offers n0 alone."""
    return await svc.filter("p", ["n0"])


async def test_restart_while_kube_schedulers_victim_terminates_keeps_the_retry_answer(make_service):
    objs = [
        make_node("n0", gpu="1"),
        make_node("n1", gpu="1"),
        _gpu_pod("v", 0, "n0"),
        _gpu_pod("w", 0, "n1"),
        _gpu_pod("p", 100),
    ]
    first = await make_service(objs)
    victims = {"n0": {"Pods": [{"UID": first.pod("v")["metadata"]["uid"]}], "NumPDBViolations": 0}}
    resp = await first.client.post(
        "/preempt", data=orjson.dumps({"Pod": first.pod("p"), "NodeNameToMetaVictims": victims})
    )
    assert (await resp.json())["NodeNameToMetaVictims"] == victims
    # kube-scheduler evicts v (Terminating, in grace) and nominates p to n0
    v = first.pod("v")
    v["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    first.cluster.apply(v)
    p = first.pod("p")
    p["status"]["nominatedNodeName"] = "n0"
    first.cluster.apply(p)
    doc = await _preemptor_refused_on_its_node(first)
    assert RETRY_TEXT in doc["Error"], doc  # the first process: a retry, not a final refusal

    second = await restart(make_service, first)
    doc = await _preemptor_refused_on_its_node(second)
    assert RETRY_TEXT in doc["Error"], (
        "after a restart the refusal of p's nominated node is final: kube-scheduler, its cache showing "
        f"no terminating victim on n0, preempts again (w): {doc}"
    )


# ------------------------------------------------------------------ whole-gang disruption mid-way
from extender.server.app import DISRUPTION  # noqa: E402


class Recorder:
    """The API's eviction as the embedded cluster does it (the pod goes at once), recorded."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.calls: list[str] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        self.calls.append(f"{namespace}/{name}")
        pod = self.cluster.get("", "Pod", namespace, name)
        if pod is not None and (not uid or pod["metadata"].get("uid") == uid):
            self.cluster.delete("", "Pod", namespace, name)
        return True


def fail_conditions_of(svc, pod: str) -> None:
    """Every condition PATCH of `pod` fails (the API server busy): its eviction is never asked."""
    real = svc.cluster.set_pod_condition

    async def busy(*, namespace: str, name: str, condition: dict) -> None:
        if name == pod:
            raise RuntimeError("the server is currently unable to handle the request")
        await real(namespace=namespace, name=name, condition=condition)

    svc.cluster.set_pod_condition = busy


def _bound_gang(name: str, n: int) -> list[dict]:
    group = make_kai_podgroup(name, min_member=n)
    group["status"] = {"phase": "Running", "running": n, "pending": 0}  # as its release wrote it
    pods = []
    for i in range(n):
        pod = gang_pod(f"{name}-{i}", name, cpu="8", node=f"n00{i}")
        pod["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
        pod["status"] = {"phase": "Running"}
        pods.append(pod)
    return [group, *pods]


async def test_restart_mid_whole_gang_disruption_leaves_no_survivor_running(make_service):
    """A gang of 4 bound whole; x-0 is deleted (its node drained). The first process evicts x-1, x-2
    and x-3 whole; x-1 and x-2 go, the PATCH of x-3's condition fails (the API server busy), so x-3
    is to be retried after RETRY_S. The process restarts first. The new one must still evict x-3:
    the KAI PodGroup's status says the gang ran whole (found by a review: with no member left to
    say so, x-3 was judged 'never bound whole' and ran alone for good)."""
    first = await make_service([*rack_cluster(racks=1, nodes_per_rack=4), *_bound_gang("x", 4)])
    ev = Recorder(first.cluster)
    first.cluster.evict_pod = ev
    fail_conditions_of(first, "x-3")
    await first.expire(0.1)
    first.cluster.delete("", "Pod", "default", "x-0")
    await first.expire(0.1)
    await settle()
    assert sorted(ev.calls) == ["default/x-1", "default/x-2"], ev.calls
    assert first.pod("x-3") is not None

    second = await restart(make_service, first)
    second.cluster.evict_pod = Recorder(second.cluster)
    for _ in range(10):  # well past RETRY_S and --stale-gang-grace-s (60s)
        await second.expire(10)
        await settle()
    assert second.pod("x-3") is None, (
        f"x-3 runs alone for good: {second.app[DISRUPTION].describe('default/x')}"
    )
    second.check_no_partial_gang()
