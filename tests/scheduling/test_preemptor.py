"""A gang that fits nowhere preempts lower-priority victims in one rack and holds that rack for itself.

Two racks (r00: n000, n001; r01: n010, n011) of 8-cpu nodes, filled with lower-priority work; the
preemptor is a rack-constrained gang of priority 1000 whose members each need a whole node.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from extender.sim.cluster import topology
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod, rack_cluster
from tests.scheduling.worlds import ClockedWorld

RACK = {"topology": "dc", "requiredTopologyLevel": "rack"}
HIGH = 1000


def running(pod: dict, node: str, priority: int) -> dict:
    pod["spec"]["nodeName"] = node
    pod["spec"]["priority"] = priority
    pod["status"] = {"phase": "Running"}
    return pod


def plain(name: str, node: str, priority: int, cpu: str = "8") -> dict:
    return running(make_pod(name, cpu=cpu), node, priority)


def victim_gang(name: str, nodes: list[str], priority: int, cpu: str = "8") -> list[dict]:
    pods = [running(gang_pod(f"{name}-{i}", name, cpu=cpu), n, priority) for i, n in enumerate(nodes)]
    return [make_kai_podgroup(name, min_member=len(nodes)), *pods]


def preemptor(name: str = "hi", n: int = 2, cpu: str = "8", priority: int = HIGH, **spec) -> list[dict]:
    pods = []
    for i in range(n):
        pod = gang_pod(f"{name}-{i}", name, cpu=cpu)
        pod["spec"]["priority"] = priority
        pod["spec"].update(spec)
        pods.append(pod)
    return [make_kai_podgroup(name, min_member=n, topology=RACK), *pods]


FULL_R01 = [plain("x", "n010", 50), plain("y", "n011", 50)]  # dearer than a gang of priority 10


def cluster(*work: list[dict]) -> list[dict]:
    return [topology("dc"), *rack_cluster(racks=2, nodes_per_rack=2), *(o for w in work for o in w)]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


class Evictions:
    """Stands in for the embedded source's evict_pod: records, evicts nothing (the victims stay)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    async def __call__(self, *, namespace: str, name: str, uid: str, reason: str) -> None:
        self.calls.append((f"{namespace}/{name}", uid, reason))


CASES = [
    pytest.param(
        [victim_gang("lo-a", ["n000", "n001"], 10), victim_gang("lo-b", ["n010", "n011"], 50)],
        "rack r00",
        ["default/lo-a"],
        ["default/lo-a-0", "default/lo-a-1"],
        id="the rack whose victims have the lowest priority",
    ),
    pytest.param(
        [
            victim_gang("lo-a", ["n000", "n001"], 10),
            [plain("p0", "n010", 10), plain("p1", "n011", 10)],
        ],
        "rack r01",
        [],
        ["default/p0", "default/p1"],
        id="same priority: the rack that breaks no gang",
    ),
    pytest.param(
        [
            victim_gang("lo-a", ["n000", "n010"], 10),
            [plain("p0", "n001", 20), plain("p1", "n011", 30)],
        ],
        "rack r00",
        ["default/lo-a"],
        ["default/lo-a-0", "default/lo-a-1", "default/p0"],
        id="a gang spanning racks is evicted whole, its member in the other rack too",
    ),
    pytest.param(
        [
            [plain("a", "n000", 10), plain("b", "n001", 10, cpu="4"), plain("c", "n001", 10, cpu="4")],
            [plain("x", "n010", 10), plain("y", "n011", 10)],
        ],
        "rack r00",
        [],
        ["default/a"],
        id="fewest victims: one pod freeing a node rather than two halves",
    ),
    pytest.param(
        [
            [plain("a", "n000", 900), plain("b", "n001", 5)],
            [plain("x", "n010", 1000), plain("y", "n011", 5)],
        ],
        "rack r00",
        [],
        ["default/a", "default/b"],
        id="equal priority is never evicted: the rack with a pod of priority 1000 is out",
    ),
]


@pytest.mark.parametrize(("work", "domain", "gangs", "victims"), CASES)
async def test_which_rack_and_which_victims(make_service, work, domain, gangs, victims):
    # the preemptor needs half a node each here when `a`/`b`/`c` are the victims, a node otherwise
    cpu = "4" if any(p.get("metadata", {}).get("name") == "c" for w in work for p in w) else "8"
    svc = await make_service(cluster(*work, preemptor(cpu=cpu)))
    evict = Evictions()
    svc.cluster.evict_pod = evict
    doc = await svc.filter("hi-0")
    assert not doc["NodeNames"]
    reason = next(iter(doc["FailedAndUnresolvableNodes"].values()))
    p = svc.scheduler.ledger.preemption("default/hi")
    assert p is not None, reason
    assert (p.domain, list(p.gangs), sorted(p.victims)) == (domain, gangs, victims)
    assert f"in {domain}" in reason and reason.endswith("waiting for them to go")
    await settle()
    assert sorted(pk for pk, _, _ in evict.calls) == victims
    assert all("preempted by gang default/hi (priority 1000)" in why for _, _, why in evict.calls)


@pytest.mark.parametrize(
    ("work", "hi", "says"),
    [
        pytest.param(
            [victim_gang("eq", ["n000", "n001"], HIGH), [plain("x", "n010", HIGH), plain("y", "n011", 2000)]],
            {},
            "no rack can be freed enough by evicting pods of priority below 1000",
            id="only equal or higher priority pods: nothing is evicted",
        ),
        pytest.param(
            [victim_gang("lo", ["n000", "n001"], 10), [plain("x", "n010", 10), plain("y", "n011", 10)]],
            {"n": 3},
            "no rack can be freed enough",
            id="no rack is big enough, whatever is evicted",
        ),
        pytest.param(
            [victim_gang("lo", ["n000", "n001"], 10), [plain("x", "n010", 10), plain("y", "n011", 10)]],
            {"preemptionPolicy": "Never"},
            "best rack",
            id="preemptionPolicy Never waits like any gang",
        ),
        pytest.param(
            [victim_gang("lo", ["n000", "n001"], 10), [plain("x", "n010", 10), plain("y", "n011", 10)]],
            {"priority": 0},
            "best rack",
            id="priority 0 never preempts",
        ),
    ],
)
async def test_nothing_is_evicted_when_no_rack_can_be_freed(make_service, work, hi, says):
    svc = await make_service(cluster(*work, preemptor(**hi)))
    evict = Evictions()
    svc.cluster.evict_pod = evict
    # every node is full: kube-scheduler offers them only when its cache saw room this one does not,
    # and the refusal is answered as a retry (scheduling.lagging), saying the same
    doc = await svc.filter("hi-0")
    reason = next(iter(doc["FailedAndUnresolvableNodes"].values()), doc["Error"])
    assert says in reason
    assert svc.scheduler.ledger.preemption("default/hi") is None
    await settle()
    assert evict.calls == []


async def test_a_pending_preemption_is_not_repeated(make_service):
    svc = await make_service(
        cluster(
            victim_gang("lo", ["n000", "n001"], 10),
            [plain("x", "n010", 50), plain("y", "n011", 50)],
            preemptor(),
        )
    )
    evict = Evictions()
    svc.cluster.evict_pod = evict
    first = await svc.filter("hi-0")
    second = await svc.filter("hi-1")
    await settle()
    assert len(evict.calls) == 2  # lo-0 and lo-1, once
    assert first["FailedAndUnresolvableNodes"] == {
        n: "gang default/hi: preempting 1 gang (default/lo) in rack r00 (priority <= 10); "
        "waiting for them to go"
        for n in svc.node_names
    }
    assert second["FailedAndUnresolvableNodes"] == first["FailedAndUnresolvableNodes"]
    assert svc.scheduler.gang_preemption.outcomes["planned"] == 1
    described = (await (await svc.client.get("/debug/gangs/default/hi")).json())["preemption"]
    assert described["domain"] == "rack r00"
    assert [v["pod"] for v in described["victims"]] == ["default/lo-0", "default/lo-1"]
    assert described["holdLeftS"] == 60.0


async def test_the_freed_rack_is_held_for_the_preemptor_until_it_is_planned_there(make_service):
    others = [plain("x", "n010", 50), plain("y", "n011", 50)]
    rival = preemptor("rival", priority=0)  # another gang that would like rack r00 too
    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), others, preemptor(), rival))
    await svc.filter("hi-0")
    await settle()  # the embedded cluster evicts (deletes) lo-0 and lo-1
    assert svc.pod("lo-0") is None and svc.pod("lo-1") is None
    assert svc.scheduler.ledger.victims_gone("default/hi")
    svc.check_invariants()
    await svc.expire(0.0)  # the ticker brings back the member turned away while the victims went
    assert "preempted" in svc.pod("hi-0")["metadata"]["annotations"]["gang-extender.io/nudge"]
    # a plain pod and another gang find rack r00 empty in the cluster, but held
    svc.cluster.apply(make_pod("intruder", cpu="8"))
    doc = await svc.filter("intruder")
    assert doc["NodeNames"] == []
    rival_doc = await svc.filter("rival-0")
    assert rival_doc["NodeNames"] == [] and svc.plan("default/rival") == {}
    # the preemptor is planned into it
    node, reason = await svc.schedule("hi-1")
    assert node in ("n000", "n001"), reason
    assert sorted(svc.plan("default/hi").values()) == ["n000", "n001"]
    assert svc.scheduler.ledger.preemption("default/hi") is None
    assert svc.scheduler.gang_preemption.outcomes["completed"] == 1
    svc.check_invariants()
    metrics = await (await svc.client.get("/metrics")).text()
    assert 'gang_extender_preemptions_total{outcome="completed"} 1.0' in metrics
    assert 'gang_extender_preemption_victims_total{kind="gang"} 1.0' in metrics


async def preempting(make_service):
    """The gang of priority 10 in r00, r01 full of dearer pods: hi preempts lo and holds r00's room."""
    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    await svc.filter("hi-0")
    await settle()
    return svc


async def test_the_hold_expires_and_the_room_is_free_again(make_service):
    svc = await preempting(make_service)
    svc.cluster.apply(make_pod("intruder", cpu="8"))
    assert (await svc.filter("intruder"))["NodeNames"] == []
    await svc.expire(59.0)
    assert svc.scheduler.ledger.preemption("default/hi") is not None
    await svc.expire(1.5)
    assert svc.scheduler.ledger.preemption("default/hi") is None
    assert svc.store.reservations == {}
    assert svc.scheduler.gang_preemption.outcomes["expired"] == 1
    assert sorted((await svc.filter("intruder"))["NodeNames"]) == ["n000", "n001"]


async def test_a_preemptor_whose_pods_are_all_gone_gives_the_held_room_back_at_once(make_service):
    """Its own members preempted or deleted while its victims' room was held: nobody is left to plan
    into it, so the room is everyone's again with the gang's entry, not when the hold runs out (the
    reservations, under keys of no pod, outlived the gang by up to a minute)."""
    svc = await preempting(make_service)
    assert svc.scheduler.ledger.victims_gone("default/hi") and svc.store.reservations
    svc.cluster.delete("", "Pod", "default", "hi-0")
    await settle()
    assert svc.scheduler.ledger.preemption("default/hi") is not None  # hi-1 is still there
    svc.cluster.delete("", "Pod", "default", "hi-1")
    await settle()
    assert svc.scheduler.ledger.preemption("default/hi") is None
    assert svc.store.reservations == {}
    svc.cluster.apply(make_pod("intruder", cpu="8"))
    assert sorted((await svc.filter("intruder"))["NodeNames"]) == ["n000", "n001"]


async def test_the_preempt_verb_hands_a_gang_member_to_the_gangs_own_preemption(make_service):
    # every node full: kube-scheduler's own filters pass none, so only its preempt verb asks the service
    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    evict = Evictions()
    svc.cluster.evict_pod = evict
    lo0 = svc.pod("lo-0")
    doc = {
        "Pod": svc.pod("hi-0"),
        "NodeNameToMetaVictims": {"n000": {"Pods": [{"UID": lo0["metadata"]["uid"]}], "NumPDBViolations": 0}},
    }
    resp = await svc.client.post("/preempt", data=orjson.dumps(doc))
    assert resp.status == 200
    assert not (await resp.json()).get("NodeNameToMetaVictims")  # kube-scheduler evicts nothing itself
    await settle()
    assert sorted(pk for pk, _, _ in evict.calls) == ["default/lo-0", "default/lo-1"]  # the gang, whole
    assert svc.scheduler.ledger.preemption("default/hi").domain == "rack r00"


async def test_the_preempt_verb_leaves_plain_pods_to_kube_scheduler(make_service):
    svc = await make_service(cluster(FULL_R01, [running(make_pod("solo", cpu="8"), "n000", 0)]))
    pod = make_pod("urgent", cpu="8")
    pod["spec"]["priority"] = HIGH
    svc.cluster.apply(pod)
    victims = {"n010": {"Pods": [{"UID": svc.pod("x")["metadata"]["uid"]}], "NumPDBViolations": 0}}
    doc = {"Pod": svc.pod("urgent"), "NodeNameToMetaVictims": victims}
    resp = await svc.client.post("/preempt", data=orjson.dumps(doc))
    assert (await resp.json())["NodeNameToMetaVictims"] == victims


async def test_victims_gone_but_the_rack_not_offered_yet_keeps_the_hold_and_preempts_nobody_else(
    make_service,
):
    svc = await preempting(make_service)
    assert svc.pod("lo-0") is None and svc.pod("lo-1") is None
    held = dict(svc.store.reservations)
    # kube-scheduler's view lags: it offers only the full rack
    doc = await svc.filter("hi-0", ["n010", "n011"])
    assert next(iter(doc["FailedAndUnresolvableNodes"].values())).endswith("waiting for them to go")
    assert svc.store.reservations == held and svc.pod("x") is not None and svc.pod("y") is not None
    assert svc.scheduler.gang_preemption.outcomes["planned"] == 1
    node, reason = await svc.schedule("hi-0")
    assert node in ("n000", "n001"), reason


async def test_the_free_room_a_preemption_counts_on_is_held_while_its_victims_go(make_service):
    """The plan evicts lo on n000 and counts on n001, free already. Were n001 anyone's while lo
    terminates, lo would have been evicted for nothing, and the preemptor would evict again when its
    hold ran out (the harness saw a gang evict pods round after round, its replacements filling in)."""
    svc = await make_service(cluster([plain("lo", "n000", 10)], FULL_R01, preemptor()))
    evict = Evictions()  # lo stays, terminating as far as the plan knows
    svc.cluster.evict_pod = evict
    await svc.filter("hi-0")
    await settle()
    assert [pk for pk, _, _ in evict.calls] == ["default/lo"]
    described = (await (await svc.client.get("/debug/gangs/default/hi")).json())["preemption"]
    assert described["claimed"] == {"n001": {"cpu": 8000, "memory": 1073741824, "pods": 1}}
    svc.cluster.apply(make_pod("intruder", cpu="8"))
    doc = await svc.filter("intruder")
    assert doc["NodeNames"] == [], "a pod took the room the preemption counts on"
    svc.check_invariants()
    # lo goes: the preemptor plans into both nodes, and the claim is its plan's now
    svc.cluster.delete("", "Pod", "default", "lo")
    await settle()
    node, reason = await svc.schedule("hi-0")
    assert node in ("n000", "n001"), reason
    assert sorted(svc.plan("default/hi").values()) == ["n000", "n001"]
    assert not any("#" in pk for pk in svc.store.reservations)
    svc.check_invariants()


async def test_a_claim_ends_with_its_preemption(make_service):
    svc = await make_service(cluster([plain("lo", "n000", 10)], FULL_R01, preemptor()))
    svc.cluster.evict_pod = Evictions()
    await svc.filter("hi-0")
    await settle()
    assert svc.store.reservations  # the claim on n001
    await svc.expire(60.5)
    assert svc.scheduler.ledger.preemption("default/hi") is None
    assert svc.store.reservations == {}
    svc.cluster.apply(make_pod("intruder", cpu="8"))
    assert (await svc.filter("intruder"))["NodeNames"] == ["n001"]


async def test_a_victim_stuck_terminating_keeps_its_own_room_held_not_the_free_room_beside_it(make_service):
    """The hold outlives its deadline while a victim terminates (a finalizer that never clears, a node
    gone NotReady), for that victim's room; the free room claimed beside it is everyone's again at
    the deadline, not for as long as the victim is stuck."""
    svc = await make_service(cluster([plain("lo", "n000", 10)], FULL_R01, preemptor()))
    svc.cluster.evict_pod = Evictions()
    await svc.filter("hi-0")
    await settle()
    lo = svc.pod("lo")
    lo["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"  # terminating, and it stays so
    svc.cluster.apply(lo)
    await settle()
    svc.cluster.apply(make_pod("intruder", cpu="8"))
    assert (await svc.filter("intruder"))["NodeNames"] == []
    await svc.expire(6000.0)
    assert svc.scheduler.ledger.preemption("default/hi") is not None, "held on while lo terminates"
    assert (await svc.filter("intruder"))["NodeNames"] == ["n001"]
    assert svc.scheduler.ledger.preemption("default/hi").claimed == {}


async def test_a_claim_goes_with_its_node_and_a_node_registered_again_is_new_room(make_service):
    """The claim on n001 must not outlive n001: given back after the node came back under its name, it
    would add room the new node never lost (16 cpu free on an 8-cpu node)."""
    svc = await make_service(cluster([plain("lo", "n000", 10)], FULL_R01, preemptor()))
    svc.cluster.evict_pod = Evictions()
    await svc.filter("hi-0")
    await settle()
    svc.cluster.delete("", "Node", None, "n001")
    await settle()
    assert svc.scheduler.ledger.preemption("default/hi").claimed == {}
    assert not any("n001#" in k for k in svc.store.reservations)
    svc.cluster.apply(make_node("n001", rack="r00", block="b0"))
    await settle()
    await svc.expire(60.5)
    row = svc.store.node_rows["n001"]
    assert svc.store.arrays.free[row][0] == 8000
    svc.check_invariants()


@pytest.mark.parametrize(
    ("lo_goes", "stray_on", "claimed", "preempting"),
    [
        # the claimed free room is taken: the claim shrinks to what is left, the preemption goes on
        pytest.param(False, "n001", {"n001": {"memory": 1073741824, "pods": 1}}, True, id="claimed-room"),
        # the victim's own room is taken: the preemption counted on room that is gone, and ends
        pytest.param(True, "n000", {}, False, id="victims-room"),
    ],
)
async def test_a_pod_bound_elsewhere_onto_room_a_preemption_holds_takes_it(
    make_service, lo_goes, stray_on, claimed, preempting
):
    """A binding the service did not make (a dead predecessor's, landing late; another scheduler's)
    lands on room a preemption holds: the store must not count the node's room twice (the
    interleavings' seed 2141 found its free cpu at -4000m). A claim keeps what is still free."""
    svc = await make_service(cluster([plain("lo", "n000", 10)], FULL_R01, preemptor()))
    svc.cluster.evict_pod = Evictions()
    await svc.filter("hi-0")
    await settle()
    if lo_goes:
        svc.cluster.delete("", "Pod", "default", "lo")
        await settle()
    svc.cluster.apply(running(make_pod("stray", cpu="8"), stray_on, 0))
    await settle()
    row = svc.store.node_rows[stray_on]
    assert (svc.store.arrays.free[row] >= 0).all(), svc.store.arrays.free[row].tolist()
    p = svc.scheduler.ledger.preemption("default/hi")
    assert (p is not None) == preempting
    held = {k: res.requests for k, res in svc.store.reservations.items() if "#" in k}
    if p is not None:
        assert p.claimed == claimed
        assert held == {f"{node}#claimed-for:default/hi": room for node, room in claimed.items()}
    else:
        reason = svc.scheduler.describe("default/hi")["lastReason"]
        assert "given up: node n000 no longer has its victims' room: pods bound since" in reason
        assert held == {}
        await svc.expire(0)  # the next pass tells its members why they wait
        said = [c for c in svc.pod("hi-0")["status"].get("conditions", ()) if c["type"] == "PodScheduled"]
        assert said and "given up: node n000 no longer has" in said[0]["message"], said
    svc.check_invariants()


async def test_a_preemption_survives_an_overcommit_its_held_room_has_no_part_in(make_service):
    """n000 runs short of gpu (a device turns unhealthy under a running pod) and then a pod lands there:
    the preemption holds only cpu, memory and a pod slot on n000, so it is no part of that, and goes on
    (found by review: every preemption holding anything on the node was given up)."""
    objs = cluster([plain("lo", "n000", 10)], FULL_R01, preemptor())
    n000 = next(o for o in objs if o["kind"] == "Node" and o["metadata"]["name"] == "n000")
    n000["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    gpu_user = running(make_pod("g", cpu="0", memory="0", gpu="2"), "n000", 2000)  # not a victim
    svc = await make_service([*objs, gpu_user])
    svc.cluster.evict_pod = Evictions()
    await svc.filter("hi-0")
    await settle()
    svc.cluster.delete("", "Pod", "default", "lo")
    await settle()
    assert svc.scheduler.ledger.preemption("default/hi").held == {"default/lo"}
    node = svc.cluster.get("", "Node", None, "n000")
    node["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    svc.cluster.apply(node)
    svc.cluster.apply(running(make_pod("daemon", cpu="0", memory="0"), "n000", 0))
    await settle()
    p = svc.scheduler.ledger.preemption("default/hi")
    assert p is not None, svc.scheduler.describe("default/hi")["lastReason"]
    assert "default/lo#held-for:default/hi" in svc.store.reservations


# A 1.37 scheduling.k8s.io PodGroup's `priority` (filled by admission from its class) is authoritative for
# every member in preemption, as kube-scheduler 1.37 ranks it (unset: 0), and its `preemptionPolicy: Never`
# keeps the gang from preempting; a 1.36 v1alpha2 PodGroup leaves each pod's own priority in force.


def k8s_gang(
    name: str,
    *,
    pod_priority: int,
    nodes: list[str] | None = None,
    version: str = "v1beta1",
    cpu: str = "8",
    **pg_spec,
) -> list[dict]:
    pg = {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
            **pg_spec,
        },
    }
    pods = []
    for i in range(2):
        pod = make_pod(f"{name}-{i}", cpu=cpu)
        pod["spec"]["schedulingGroup"] = {"podGroupName": name}
        pod["spec"]["priority"] = pod_priority
        if nodes:
            running(pod, nodes[i], pod_priority)
        pods.append(pod)
    return [pg, *pods]


@pytest.mark.parametrize(
    ("preemptor_gang", "victims", "evicted"),
    [
        pytest.param(
            k8s_gang("hi", pod_priority=0, priority=HIGH),
            k8s_gang("lo", pod_priority=HIGH, nodes=["n000", "n001"], priority=10),
            ["default/lo-0", "default/lo-1"],
            id="the PodGroups' priorities rank, not the pods'",
        ),
        pytest.param(
            k8s_gang("hi", pod_priority=HIGH, priority=HIGH, preemptionPolicy="Never"),
            k8s_gang("lo", pod_priority=10, nodes=["n000", "n001"], priority=10),
            [],
            id="preemptionPolicy Never on the PodGroup: the gang waits",
        ),
        pytest.param(
            k8s_gang("hi", pod_priority=HIGH),
            k8s_gang("lo", pod_priority=10, nodes=["n000", "n001"], priority=10),
            [],
            id="a PodGroup without priority ranks 0 and never preempts",
        ),
        pytest.param(
            k8s_gang("hi", pod_priority=HIGH, version="v1alpha2", priority=0),
            k8s_gang("lo", pod_priority=10, nodes=["n000", "n001"], version="v1alpha2", priority=0),
            ["default/lo-0", "default/lo-1"],
            id="1.36 v1alpha2: each pod's own priority",
        ),
    ],
)
async def test_a_workload_api_podgroups_priority_speaks_for_its_members(
    make_service, preemptor_gang, victims, evicted
):
    svc = await make_service(cluster(victims, FULL_R01, preemptor_gang))
    evict = Evictions()
    svc.cluster.evict_pod = evict
    doc = await svc.filter("hi-0")
    assert not doc["NodeNames"]
    await settle()
    assert sorted(pk for pk, _, _ in evict.calls) == evicted, doc["FailedAndUnresolvableNodes"]
    svc.check_invariants()


def test_a_gang_member_planned_through_the_preempt_verb_goes_only_where_its_selector_admits() -> None:
    """kube-scheduler's own filters passed a gang member no node, so its preempt verb plans the gang
    over every node (gang_preemption._plan_everywhere): only the nodes the member's own terms admit,
    as kube-scheduler would have offered. Over every schedulable node, a member selecting n1 was
    planned on n2, the busier node packing prefers (the interleavings harness, seed 132), and a
    release binds it there."""
    n1 = make_node("n1", cpu="4")
    n1["metadata"]["labels"]["picky"] = "yes"
    busy = make_pod("o2", cpu="2", node="n2", uid="uid-o2")
    members = [gang_pod(f"g-{i}", "g", cpu="2", uid=f"uid-g-{i}") for i in range(2)]
    members[1]["spec"]["nodeSelector"] = {"picky": "yes"}
    for m in members:
        m["spec"]["priority"] = 100
    w = ClockedWorld([n1, make_node("n2", cpu="4"), busy, make_kai_podgroup("g", min_member=2), *members])
    effects = w.scheduler.gang_preemption.preempt_as_gang(w.cluster.get("", "Pod", "default", "g-1"))
    assert effects is not None
    assert w.scheduler.ledger.planned_node("default/g-1", "uid-g-1") == "n1"


async def test_a_member_its_gangs_disruption_is_evicting_is_not_asked_again_as_a_victim(make_service):
    """lo-0 is gone; the disruption evicts lo-1 (its DisruptionTarget written, the eviction refused by
    a disruption budget or not yet in the watch: lo-1 still runs here). hi, preempting, must not pick
    lo-1 as a victim and ask for its eviction a second time (found by review)."""
    svc = await make_service(cluster(victim_gang("lo", ["n000", "n001"], 10), FULL_R01, preemptor()))
    ev = Evictions()
    svc.cluster.evict_pod = ev
    await svc.expire(0.1)
    svc.cluster.delete("", "Pod", "default", "lo-0")
    await svc.expire(0.1)
    await settle()
    assert [pk for pk, _, _ in ev.calls] == ["default/lo-1"]
    await svc.filter("hi-0", ["n000"])
    await settle()
    asked = [pk for pk, _, _ in ev.calls]
    assert len(asked) == len(set(asked)), f"asked to evict twice: {ev.calls}"


def _marked(pod: dict) -> dict:
    """Marked by an earlier preemption of ours whose eviction a disruption budget refused: the
    condition stays, the pod keeps running, and nobody asks again."""
    pod.setdefault("status", {}).setdefault("conditions", []).append(
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByGangScheduler", "message": "x"}
    )
    return pod


async def test_a_pod_marked_by_a_preemption_since_ended_is_a_victim_again(make_service):
    """r00 runs two pods of priority 10 marked by an earlier preemption whose evictions a disruption
    budget refused (they run on; that preemption ended); r01 two plain pods of priority 50. A gang of
    priority 1000 needing a whole rack preempts r00's two again: their room is not taken as coming,
    nor are they kept from being victims (found by review: it evicted nobody and waited for good)."""
    work = [
        [_marked(plain("a", "n000", 10)), _marked(plain("b", "n001", 10))],
        [plain("x", "n010", 50), plain("y", "n011", 50)],
    ]
    svc = await make_service(cluster(*work, preemptor()))
    evict = Evictions()
    svc.cluster.evict_pod = evict
    await svc.filter("hi-0")
    await settle()
    assert sorted(pk for pk, _, _ in evict.calls) == ["default/a", "default/b"], evict.calls
