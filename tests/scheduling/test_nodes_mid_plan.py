"""Nodes changing mid-plan (relabelled, deleted and registered again, gone NotReady, allocatable
lowered) between a gang's filter and its binds, during preemptions, releases and the start-up fence."""

from __future__ import annotations

import asyncio
import copy

from extender.sim.cluster import topology
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod, rack_cluster

TOPOLOGY = topology("dc")
RACK = {"topology": "dc", "requiredTopologyLevel": "rack"}


def gang(name: str, n: int, *, cpu: str = "2", gpu: str | None = None, topology=None) -> list[dict]:
    pg = make_kai_podgroup(name, min_member=n, topology=topology)
    return [pg] + [gang_pod(f"{name}-{i}", name, cpu=cpu, gpu=gpu) for i in range(n)]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def shrink(svc, node: str, alloc: dict[str, str]) -> None:
    """The node's allocatable lowered (status.allocatable, as the kubelet writes it)."""
    obj = copy.deepcopy(svc.cluster.get("", "Node", None, node))
    obj["status"]["allocatable"].update(alloc)
    svc.cluster.apply(obj)


# ------------------------------------------------------------------ allocatable shrunk under a plan
async def test_a_plan_on_a_node_whose_allocatable_shrank_is_not_released_onto_it(make_service):
    """Two 4-cpu members planned together on one 8-cpu node; the node's allocatable drops to 4 cpu
    (kubelet restarted with a larger system-reserved; for GPUs, a device plugin marking a GPU
    unhealthy). kube-scheduler still offers the node to each member alone (4 cpu free as its cache
    sees it). Released at the first member's bind, both land on it: 8 cpu on a 4-cpu node."""
    svc = await make_service([*rack_cluster(racks=1, nodes_per_rack=2), *gang("g", 2, cpu="4")])
    node, reason = await svc.schedule("g-0")
    assert node, reason
    plan = svc.plan("default/g")
    assert set(plan.values()) == {node}, plan  # packed onto one node
    shrink(svc, node, {"cpu": "4"})
    await settle()
    error = await svc.bind("g-0", node)
    on_node = [n for n in ("g-0", "g-1") if svc.node_of(n) == node]
    assert len(on_node) <= 1, (
        f"{on_node} (4 cpu each) released onto {node}, whose allocatable is now 4 cpu ({error!r})"
    )
    svc.check_invariants()


# ------------------------------------------------------------------ a node registered again under its name
class GatedBinds:
    """The embedded cluster's bind, held until the test opens the gate (an API server slow to take
    the release's POSTs), with no sleeping."""

    def __init__(self, cluster) -> None:
        self.real = cluster.bind_pod
        self.gate = asyncio.Event()
        self.waiting = 0

    async def __call__(self, *, namespace: str, name: str, uid: str, node: str, persist_s: float = 0.0):
        self.waiting += 1
        await self.gate.wait()
        await self.real(namespace=namespace, name=name, uid=uid, node=node)


def free_cpu(svc, node: str) -> int:
    return int(svc.store.arrays.free[svc.store.node_rows[node], svc.store.resources.find("cpu")])


async def test_a_single_pods_held_room_on_a_node_registered_again_is_not_given_to_it(make_service):
    """A plain pod's bind holds 6 cpu on n000 while its POST waits out the start-up fence. n000 is
    deleted and registers again under its name (a kubelet re-registering its Node), taking the same
    row. Once the pod is bound, its hold is given back to the new row, which never lost it: n000 shows
    8 cpu free with 6 in use, and a second 6-cpu pod is bound there."""
    objs = [make_node("n000", cpu="8"), make_pod("p", cpu="6"), make_pod("q", cpu="6")]
    svc = await make_service(objs, source_bind_fence_s=5.0)
    doc = await svc.filter("p")
    assert doc["NodeNames"] == ["n000"], doc
    bind = asyncio.create_task(svc.bind("p", "n000"))
    await settle()
    assert not bind.done() and "default/p" in svc.store.reservations
    svc.cluster.delete("", "Node", None, "n000")
    svc.cluster.apply(make_node("n000", cpu="8"))
    await settle()
    await svc.expire(5.5)  # the fence is over: the POST goes out
    assert await asyncio.wait_for(bind, 2) == ""
    assert svc.node_of("p") == "n000"
    shown = free_cpu(svc, "n000")
    doc = await svc.filter("q", ["n000"])
    error = await svc.bind("q", "n000")
    assert svc.node_of("q") is None, (
        f"q (6 cpu) bound beside p (6 cpu) on 8-cpu n000, which showed {shown}m free: {doc}, {error!r}"
    )
    svc.check_invariants()


async def test_a_single_pod_asked_again_while_its_own_bind_waits_is_offered_its_own_room(make_service):
    """A plain pod's bind holds 6 cpu of 8-cpu n000 while its POST waits out the start-up fence;
    kube-scheduler's bind call timed out meanwhile, and it filters the pod again. n000 passes: the
    room held there is the pod's own (as for a binding whose answer was lost). Answered "no node
    has room", kube-scheduler would park a pod whose bind then lands."""
    objs = [make_node("n000", cpu="8"), make_pod("p", cpu="6")]
    svc = await make_service(objs, source_bind_fence_s=5.0)
    assert (await svc.filter("p"))["NodeNames"] == ["n000"]
    bind = asyncio.create_task(svc.bind("p", "n000"))
    await settle()
    assert not bind.done() and "default/p" in svc.store.reservations
    doc = await svc.filter("p", ["n000"])
    assert doc["NodeNames"] == ["n000"], doc
    await svc.expire(5.5)
    assert await asyncio.wait_for(bind, 2) == ""
    assert svc.node_of("p") == "n000"
    svc.check_invariants()


async def test_a_release_in_flight_on_a_node_registered_again_leaves_its_room_counted(make_service):
    """The same through a gang's release: both members' POSTs are in flight (a slow API server) when
    their node is deleted and registers again under its name. Bound there, their holds are given back
    to a row that never lost them: the node shows empty with 8 of 8 cpu in use."""
    objs = [make_node("n000", cpu="8"), make_node("n001", cpu="8"), *gang("g", 2, cpu="4")]
    objs.append(make_pod("q", cpu="6"))
    svc = await make_service(objs)
    gated = GatedBinds(svc.cluster)
    svc.cluster.bind_pod = gated
    node, reason = await svc.schedule("g-0")
    assert node == "n000" and set(svc.plan("default/g").values()) == {"n000"}, (node, reason)
    bind = asyncio.create_task(svc.bind("g-0", "n000"))  # released at the first member's bind
    await settle()
    assert gated.waiting == 2, gated.waiting
    svc.cluster.delete("", "Node", None, "n000")
    svc.cluster.apply(make_node("n000", cpu="8"))
    await settle()
    # the bindings in flight land on the node registered again: their room is taken there already
    assert free_cpu(svc, "n000") == 0
    assert (await svc.filter("q", ["n000"]))["NodeNames"] == []
    gated.gate.set()
    assert await asyncio.wait_for(bind, 2) == ""
    await settle()
    assert svc.node_of("g-0") == svc.node_of("g-1") == "n000"
    shown = free_cpu(svc, "n000")
    error = await svc.bind("q", "n000")
    assert svc.node_of("q") is None, f"q (6 cpu) bound on full n000, which showed {shown}m free: {error!r}"
    svc.check_invariants()


# ---------------------------------------------------------- a victim's node gone NotReady mid-preemption
async def test_a_preemptor_whose_victim_is_stuck_on_a_notready_node_takes_a_rack_freed_since(make_service):
    """hi (priority 1000, 2 x 8 cpu, one rack) preempts gang lo in rack r00 (r01 is full of dearer
    pods). lo-0 goes; lo-1's node n001 goes NotReady, so lo-1 stays Terminating for as long as its
    kubelet is away (nothing confirms the deletion). Meanwhile r01 empties: hi fits there whole, and
    the room it waits for in r00 is on a node that admits nobody. hi still waits for lo-1, past its
    preemption hold, for as long as n001 stays down: a gang waiting for good beside a free rack, with
    n000's room held for it all that time."""
    from tests.scheduling.test_preemptor import FULL_R01, Evictions, cluster, preemptor, victim_gang

    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    svc.cluster.evict_pod = Evictions()
    doc = await svc.filter("hi-0")
    assert doc["NodeNames"] == [] and svc.scheduler.ledger.preemption("default/hi") is not None, doc
    await settle()
    svc.cluster.delete("", "Pod", "default", "lo-0")  # gone
    lo1 = copy.deepcopy(svc.pod("lo-1"))
    lo1["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"  # evicted; its kubelet never confirms
    svc.cluster.apply(lo1)
    n001 = copy.deepcopy(svc.cluster.get("", "Node", None, "n001"))
    n001["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    n001["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    svc.cluster.apply(n001)
    await settle()
    # r01's pods end: the whole rack is free
    svc.cluster.delete("", "Pod", "default", "x")
    svc.cluster.delete("", "Pod", "default", "y")
    await settle()
    for _ in range(5):  # ten minutes of kube-scheduler retries, well past the 60 s preemption hold
        await svc.expire(120.0)
        node, reason = await svc.schedule("hi-0")
        if node:
            break
    assert node in ("n010", "n011"), (
        f"hi still waits for lo-1 on NotReady n001 with rack r01 free: {reason!r}; "
        f"preemption={svc.scheduler.ledger.preemption('default/hi')}"
    )
    assert svc.scheduler.ledger.preemption("default/hi") is None
    svc.cluster.delete("", "Pod", "default", "lo-1")  # its node back, or removed: the victim goes
    await settle()
    svc.check_invariants()


# ---------------------------------------------------------- a node relabelled while binds wait out the fence
async def test_a_rack_groups_fenced_binds_do_not_land_in_two_racks_after_a_relabel(make_service):
    """A KAI PodGroup of quorum one with a required rack (its members share a rack all the same).
    Within the start-up fence both members' binds are decided in rack r00 (n000, n001) and hold
    their room while their POSTs wait. n001 is relabelled into rack r01 meanwhile. When the fence
    ends both POSTs go out as decided: a-0 in r00, a-1 in r01, the group split over two racks
    (fence_over re-checks only the room and the queue, not the node's labels, taints or the
    group's domain)."""
    rack = {"topology": "dc", "requiredTopologyLevel": "rack"}
    objs = [*rack_cluster(), TOPOLOGY, make_kai_podgroup("a", min_member=1, topology=rack)]
    objs += [gang_pod(f"a-{i}", "a", cpu="2") for i in range(2)]
    svc = await make_service(objs, source_bind_fence_s=5.0)
    binds = [asyncio.create_task(svc.bind("a-0", "n000"))]
    await settle()
    binds.append(asyncio.create_task(svc.bind("a-1", "n001")))
    await settle()
    assert not any(b.done() for b in binds), [b.result() for b in binds if b.done()]
    assert {"default/a-0", "default/a-1"} <= set(svc.store.reservations)
    n001 = copy.deepcopy(svc.cluster.get("", "Node", None, "n001"))
    n001["metadata"]["labels"]["topology.kubernetes.io/rack"] = "r01"
    svc.cluster.apply(n001)
    await settle()
    await svc.expire(5.5)
    errors = await asyncio.wait_for(asyncio.gather(*binds), 2)
    racks = {
        n: svc.store.node(svc.node_of(n))["metadata"]["labels"]["topology.kubernetes.io/rack"]
        for n in ("a-0", "a-1")
        if svc.node_of(n)
    }
    assert len(set(racks.values())) <= 1, f"the rack group was bound in two racks: {racks} ({errors})"
    svc.check_invariants()
