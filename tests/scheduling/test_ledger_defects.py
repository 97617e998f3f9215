"""Issue 9's defects, one regression test each (defects 7 and 8 live with the wire and CLI tests).

Every test drives the real HTTP service on a fake clock and ends with the invariants: no node
over-committed, no partial gang, no hold without a plan or a bind behind it.
"""

from __future__ import annotations

import asyncio

from extender.gang.entry import Phase
from extender.model.resources import to_units
from extender.sim.cluster import topology
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod, rack_cluster
from tests.scheduling.faults import ApiFaults

TOPOLOGY = topology("dc")
RACK = {"topology": "dc", "requiredTopologyLevel": "rack"}


def gang(
    name: str, n: int, *, cpu: str = "2", min_member: int | None = None, topology=None, **kw
) -> list[dict]:
    pg = make_kai_podgroup(name, min_member=min_member or n, topology=topology)
    return [pg] + [gang_pod(f"{name}-{i}", name, cpu=cpu, **kw) for i in range(n)]


async def filter_all(svc, names: list[str]) -> dict[str, str]:
    nodes = {}
    for n in names:
        node, reason = await svc.schedule(n)
        assert node, f"{n}: {reason}"
        nodes[n] = node
    return nodes


def free_is_exact(svc) -> None:
    """free == allocatable - bound pods - holds, on every live node and every named column."""
    store = svc.store
    for name, row in store.node_rows.items():
        expected = store.arrays.allocatable[row].copy()
        for rec in store.pods.values():
            if rec.bound_row == row:
                expected -= store.vector(rec.requests)
        for res in store.reservations.values():
            if res.row == row and res.node == name:
                expected -= store.vector(res.requests)
        assert store.arrays.free[row].tolist() == expected.tolist(), f"{name}: free drifted"


# -------------------------------------------------------------- 1: a new resource name mid-barrier
async def test_a_new_resource_name_while_a_gang_waits_breaks_nothing(make_service):
    svc = await make_service(
        rack_cluster() + gang("train", 3) + [make_pod("wants-foo")], gang_release_on_first_bind=False
    )
    nodes = await filter_all(svc, ["train-0", "train-1", "train-2"])
    waiting = [asyncio.create_task(svc.bind(n, nodes[n])) for n in ("train-0", "train-1")]
    await asyncio.sleep(0.05)
    # a pod asking for a resource no node offers: it fits nowhere, and adds no column
    pod = svc.pod("wants-foo")
    pod["spec"]["containers"][0]["resources"]["requests"]["example.com/foo"] = "1"
    svc.cluster.apply(pod)
    width = svc.store.arrays.n_res
    doc = await svc.filter("wants-foo")
    assert doc["NodeNames"] == []
    assert "no node offers example.com/foo" in next(iter(doc["FailedNodes"].values()))
    assert svc.store.arrays.n_res == width
    # a device plugin registers a resource on a node while the holds stand
    node = svc.store.node(nodes["train-0"])
    node["status"]["allocatable"]["example.com/dev"] = "4"
    svc.cluster.apply(node)
    free_is_exact(svc)
    await svc.expire(5.1)  # the barrier times out: every waiting bind answered, every hold given back
    errors = await asyncio.wait_for(asyncio.gather(*waiting), 2)
    assert all("quorum did not reach bind" in e for e in errors)
    assert svc.store.reservations == {}
    free_is_exact(svc)
    await svc.expire(2.1)  # past the backoff, the whole gang binds
    nodes = await filter_all(svc, ["train-0", "train-1", "train-2"])
    errors = await asyncio.gather(*(svc.bind(n, nodes[n]) for n in nodes))
    assert errors == ["", "", ""]
    svc.check_invariants()
    free_is_exact(svc)


async def test_a_resource_that_appears_later_is_charged_for_pods_and_holds_that_asked_for_it(make_service):
    svc = await make_service(rack_cluster(racks=1, nodes_per_rack=2))
    svc.cluster.apply(make_pod("early", node="n000"))
    pod = svc.pod("early")
    pod["spec"]["containers"][0]["resources"]["requests"]["example.com/dev"] = "3"
    svc.cluster.apply(pod)  # bound before any node offers the resource (another scheduler did it)
    node = svc.store.node("n000")
    node["status"]["allocatable"]["example.com/dev"] = "4"
    svc.cluster.apply(node)
    col = svc.store.resources.find("example.com/dev")
    assert svc.store.arrays.free[svc.store.node_rows["n000"], col] == 1
    free_is_exact(svc)


# -------------------------------------------------------------- 2: a request past int64
async def test_an_absurd_request_fits_nowhere_and_breaks_nothing(make_service):
    svc = await make_service([*rack_cluster(racks=1, nodes_per_rack=2), make_pod("absurd", cpu="1e16")])
    doc = await svc.filter("absurd")
    assert doc["NodeNames"] == [] and "cpu short" in next(iter(doc["FailedNodes"].values()))
    svc.cluster.apply(make_pod("bound-absurd", cpu="1e16", node="n000"))  # someone bound it anyway
    svc.cluster.apply(make_node("n999", rack="r00", block="b0"))  # the cache still takes changes
    assert "n999" in svc.store.node_rows
    assert (await svc.client.get("/healthz")).status == 200


async def test_healthz_fails_when_a_background_task_has_died(make_service):
    svc = await make_service(rack_cluster())
    from extender.server.app import READY

    svc.app[READY]["failed"] = "the cluster source stopped: OverflowError()"
    resp = await svc.client.get("/healthz")
    assert resp.status == 503 and "the cluster source stopped" in await resp.text()


# -------------------------------------------------------------- 3: a release whose binds all fail
async def test_a_release_the_api_refuses_keeps_the_gang_planned_and_never_binds_members_alone(
    make_service, monkeypatch
):
    objs = [*rack_cluster(racks=2, nodes_per_rack=2), TOPOLOGY, *gang("train", 4, topology=RACK)]
    svc = await make_service(objs, gang_release_on_first_bind=False)
    names = [f"train-{i}" for i in range(4)]
    failing = ApiFaults(svc.cluster, fail=names, message="etcdserver: request timed out")
    monkeypatch.setattr(svc.cluster, "bind_pod", failing)
    nodes = await filter_all(svc, names)
    errors = await asyncio.gather(*(svc.bind(n, nodes[n]) for n in names))
    assert all("request timed out" in e for e in errors)
    assert not any(svc.node_of(n) for n in names)
    assert svc.phase("default/train") is not Phase.BOUND  # nothing is bound: not Bound
    assert svc.plan("default/train") == {f"default/{n}": nodes[n] for n in names}  # place and capacity kept
    assert set(svc.store.reservations) == {f"default/{n}" for n in names}
    # kube-scheduler retries one member: it waits for the others, never binds alone
    failing.fail.clear()
    lone = asyncio.create_task(svc.bind("train-0", nodes["train-0"]))
    await asyncio.sleep(0.05)
    assert not lone.done() and not svc.node_of("train-0")
    # the others come back: the gang binds whole, where it was planned
    rest = await asyncio.gather(*(svc.bind(n, nodes[n]) for n in names[1:]))
    assert await lone == "" and rest == ["", "", ""]
    assert {n: svc.node_of(n) for n in names} == nodes
    assert svc.phase("default/train") is Phase.BOUND
    svc.check_invariants()


async def test_a_partly_refused_release_is_not_bound_until_its_quorum_is(make_service, monkeypatch):
    svc = await make_service(rack_cluster() + gang("train", 3))
    names = ["train-0", "train-1", "train-2"]
    monkeypatch.setattr(
        svc.cluster,
        "bind_pod",
        ApiFaults(svc.cluster, fail={"train-2"}, message="etcdserver: request timed out"),
    )
    nodes = await filter_all(svc, names)
    await asyncio.gather(*(svc.bind(n, nodes[n]) for n in names))
    assert svc.phase("default/train") is not Phase.BOUND
    # the refused member never comes back in time: the barrier expires, its hold is given back
    await svc.expire(5.1)
    assert svc.store.reservations == {}
    assert svc.plan("default/train") == {}


# -------------------------------------------------------------- 4: a restart after quorum bound
async def test_after_a_restart_a_bound_quorum_still_grows(make_service):
    objs = [*rack_cluster(), make_kai_podgroup("train", min_member=2)]
    objs += [gang_pod(f"train-{i}", "train", node="n000") for i in range(2)]  # bound by the last process
    objs += [gang_pod(f"train-{i}", "train") for i in (2, 3)]
    svc = await make_service(objs)  # a fresh process: nothing remembered
    assert svc.phase("default/train") is Phase.BOUND  # derived from the cluster
    for name in ("train-2", "train-3"):
        node, reason = await svc.schedule(name)
        assert node, reason
        assert await svc.bind(name, node) == ""
    svc.check_invariants()


async def test_a_restart_mid_barrier_replans_in_the_new_process(make_service):
    objs = rack_cluster() + gang("train", 3)
    first = await make_service(objs)
    nodes = await filter_all(first, ["train-0", "train-1"])
    waiting = asyncio.create_task(first.bind("train-0", nodes["train-0"]))
    await asyncio.sleep(0.05)
    waiting.cancel()
    second = await make_service(first.cluster.all_objects())  # the same cluster, a new process
    names = ["train-0", "train-1", "train-2"]
    nodes = await filter_all(second, names)
    assert await asyncio.gather(*(second.bind(n, nodes[n]) for n in names)) == ["", "", ""]
    second.check_invariants()


# -------------------------------------------------------------- 5: anti-affinity converges
ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def spread_gang(n: int) -> list[dict]:
    objs = gang("spread", n, cpu="1", labels={"app": "spread"})
    for pod in objs[1:]:
        pod["spec"]["affinity"] = ANTI
    return objs


async def test_members_that_must_be_apart_are_planned_one_per_node(make_service):
    svc = await make_service(rack_cluster(racks=1, nodes_per_rack=4) + spread_gang(3))
    await svc.filter("spread-0")
    plan = svc.plan("default/spread")
    assert len(set(plan.values())) == 3


async def test_a_plan_converges_when_kube_scheduler_keeps_refusing_nodes(make_service):
    """kube-scheduler drops nodes the planner cannot see (a host port, another anti-affinity):
    each refusal moves the member or is remembered, so the plan settles instead of cycling."""
    svc = await make_service(rack_cluster(racks=1, nodes_per_rack=4) + spread_gang(3))
    refused = {"default/spread-1": {"n000", "n001"}, "default/spread-2": {"n000"}}
    names = ["spread-0", "spread-1", "spread-2"]
    nodes: dict[str, str] = {}
    for _ in range(6):
        for n in names:
            offered = [x for x in svc.node_names if x not in refused.get(f"default/{n}", set())]
            doc = await svc.filter(n, offered)
            if doc["NodeNames"]:
                nodes[n] = doc["NodeNames"][0]
        plan = svc.plan("default/spread")
        if len(plan) == 3 and all(plan[f"default/{n}"] not in refused.get(f"default/{n}", ()) for n in names):
            break
    assert await asyncio.gather(*(svc.bind(n, nodes[n]) for n in names)) == ["", "", ""]
    assert len({svc.node_of(n) for n in names}) == 3
    svc.check_invariants()


async def test_too_few_nodes_for_members_that_must_be_apart_says_so(make_service):
    svc = await make_service(rack_cluster(racks=1, nodes_per_rack=2) + spread_gang(3))
    doc = await svc.filter("spread-0")
    reason = next(iter(doc["FailedNodes"].values()))
    assert "members must be on separate nodes" in reason


# -------------------------------------------------------------- 6: a bind after a slow release
async def test_a_retried_bind_during_a_slow_release_is_answered_in_time(make_service, monkeypatch):
    svc = await make_service(rack_cluster() + gang("train", 2), cluster_http_timeout_s=1.0, gang_wait_s=0.5)
    monkeypatch.setattr(svc.cluster, "bind_pod", ApiFaults(svc.cluster, delay_s=1.2))
    nodes = await filter_all(svc, ["train-0", "train-1"])
    loop = asyncio.get_running_loop()
    first = await asyncio.gather(*(svc.bind(n, nodes[n]) for n in nodes))
    assert all("still in flight" in e for e in first)
    started = loop.time()
    retry = await asyncio.wait_for(svc.bind("train-0", nodes["train-0"]), 1.0)  # kube-scheduler's retry
    assert loop.time() - started < 1.0
    assert retry == "" or "in flight" in retry
    await asyncio.sleep(0.6)
    assert await svc.bind("train-0", nodes["train-0"]) == ""  # done: the retry succeeds at once
    assert svc.phase("default/train") is Phase.BOUND
    svc.check_invariants()


async def test_every_waiting_bind_is_answered_by_its_own_deadline(make_service):
    svc = await make_service(
        rack_cluster() + gang("train", 3),
        cluster_http_timeout_s=10.0,
        gang_wait_s=5.0,
        gang_release_on_first_bind=False,
    )
    nodes = await filter_all(svc, ["train-0", "train-1", "train-2"])
    waiting = asyncio.create_task(svc.bind("train-0", nodes["train-0"]))
    await asyncio.sleep(0.05)
    entry = svc.scheduler.ledger.gangs["default/train"]
    entry.answer_at = entry.hold_until = None  # as if the barrier's own expiry were lost
    await svc.expire(9.6)
    error = await asyncio.wait_for(waiting, 1)
    assert "before the scheduler's httpTimeout" in error
    assert "default/train-0" in svc.scheduler.ledger.entry("default/train").arrived  # its place stays


# -------------------------------------------------------------- 9: each subgroup binds whole
SUBGROUPS = [{"name": "a", "minMember": 2}, {"name": "b", "minMember": 2}]


def sub_pod(name: str, leaf: str, **kw) -> dict:
    return gang_pod(name, "tree", labels={"kai.scheduler/subgroup-name": leaf}, **kw)


async def test_a_subgroup_binds_its_own_min_member_together_after_the_root_quorum(make_service):
    pg = make_kai_podgroup("tree", subgroups=SUBGROUPS)
    pg["spec"]["minSubGroup"] = 1
    objs = [*rack_cluster(), pg, sub_pod("a-0", "a"), sub_pod("a-1", "a"), sub_pod("b-0", "b")]
    svc = await make_service(objs, gang_release_on_first_bind=False)
    nodes = await filter_all(svc, ["a-0", "a-1"])
    assert await asyncio.gather(*(svc.bind(n, nodes[n]) for n in nodes)) == ["", ""]
    assert svc.phase("default/tree") is Phase.BOUND
    doc = await svc.filter("b-0")  # its subgroup needs 2 and has 1: it waits, never binds alone
    assert doc["NodeNames"] == []
    assert "subgroup b waiting for pods: 1 exist, 2 needed" in next(iter(doc["FailedNodes"].values()))
    assert "not binding it alone" in await svc.bind("b-0", svc.node_names[0])
    svc.cluster.apply(sub_pod("b-1", "b"))
    nodes = await filter_all(svc, ["b-0", "b-1"])
    assert len(svc.plan("default/tree")) == 2
    lone = asyncio.create_task(svc.bind("b-0", nodes["b-0"]))
    await asyncio.sleep(0.05)
    assert not lone.done()  # b's quorum binds together
    assert await svc.bind("b-1", nodes["b-1"]) == "" and await lone == ""
    svc.check_invariants()


async def test_a_subgroup_short_of_pods_waits_before_the_root_quorum_too(make_service):
    pg = make_kai_podgroup("tree", subgroups=SUBGROUPS)
    pg["spec"]["minSubGroup"] = 1
    svc = await make_service(
        [*rack_cluster(), pg, sub_pod("a-0", "a"), sub_pod("a-1", "a"), sub_pod("b-0", "b")]
    )
    doc = await svc.filter("b-0")
    assert doc["NodeNames"] == [] and "subgroup b is not ready" in next(iter(doc["FailedNodes"].values()))


def test_free_is_exact_catches_drift():
    """The arithmetic check above can fail: a hold the arrays never saw is drift."""
    from extender.state.store import ClusterStore, Reservation

    class Svc:
        store = ClusterStore()

    Svc.store.upsert(make_node("n0"))
    Svc.store.reservations["default/x"] = Reservation("n0", 0, {"cpu": to_units("cpu", "1")})
    try:
        free_is_exact(Svc)
    except AssertionError:
        return
    raise AssertionError("free_is_exact accepted a hold the arrays never subtracted")


# -------------------------------------------------------------- our faults are never the caller's
async def test_a_value_error_of_our_own_is_an_internal_error_not_a_400(make_service, monkeypatch):
    svc = await make_service([*rack_cluster(), make_pod("plain")])

    def broken(*_a, **_k):
        raise ValueError("operands could not be broadcast together with shapes (5,) (6,)")

    monkeypatch.setattr(svc.scheduler, "filter", broken)
    monkeypatch.setattr(svc.scheduler, "plain_refusals", broken)  # the plain pods' path falls back
    doc = await svc.filter("plain")  # asserts HTTP 200
    assert doc["Error"].startswith("internal error in gang-extender filter: operands could not be broadcast")


async def test_members_turned_away_during_a_backoff_are_nudged_when_it_ends(make_service):
    svc = await make_service(rack_cluster() + gang("train", 3), gang_release_on_first_bind=False)
    nodes = await filter_all(svc, ["train-0", "train-1", "train-2"])
    waiting = asyncio.create_task(svc.bind("train-0", nodes["train-0"]))
    await asyncio.sleep(0.05)
    await svc.expire(5.1)
    assert "quorum did not reach bind" in await waiting
    for n in ("train-0", "train-1", "train-2"):
        assert (await svc.filter(n))["NodeNames"] == []  # backing off: back to kube-scheduler's queues

    def nudges() -> dict[str, str]:
        return {
            n: svc.pod(n)["metadata"].get("annotations", {}).get("gang-extender.io/nudge", "")
            for n in ("train-0", "train-1", "train-2")
        }

    before = nudges()
    await svc.expire(2.1)
    await asyncio.sleep(0.05)
    after = nudges()
    assert all(after[n] and after[n] != before[n] for n in after), after  # each pod updated: retried now


# -------------------------------------------------------------- members spread over kube-scheduler's backoff
async def test_members_that_reach_bind_at_different_times_keep_their_places_until_all_have(make_service):
    """kube-scheduler backs each pod off on its own after a failed bind, so a gang's members come
    back spread over seconds. A member that reached bind once keeps its place; the gang binds whole
    when the last one arrives, even if the others' calls were answered meanwhile."""
    svc = await make_service(
        rack_cluster() + gang("train", 3), gang_wait_s=5.0, gang_hold_s=30.0, gang_release_on_first_bind=False
    )
    nodes = await filter_all(svc, ["train-0", "train-1", "train-2"])
    first = asyncio.create_task(svc.bind("train-0", nodes["train-0"]))
    await asyncio.sleep(0.05)
    await svc.expire(5.1)
    answer = await asyncio.wait_for(first, 1)
    assert "1 of 3 planned pods reached bind within 5s" in answer and "places stay held" in answer
    assert set(svc.store.reservations) == {"default/train-0", "default/train-1", "default/train-2"}
    await svc.expire(3.0)
    second = asyncio.create_task(svc.bind("train-1", nodes["train-1"]))
    await asyncio.sleep(0.05)
    await svc.expire(6.0)  # its wait ends too; train-0 is back in kube-scheduler's backoff
    assert "places stay held" in await asyncio.wait_for(second, 1)
    assert await svc.bind("train-2", nodes["train-2"]) == ""  # the last one: all three bind
    assert {n: svc.node_of(n) for n in nodes} == nodes
    assert svc.phase("default/train") is Phase.BOUND
    assert await svc.bind("train-0", nodes["train-0"]) == ""  # kube-scheduler's retry: done already
    svc.check_invariants()


async def test_a_plan_whose_members_never_all_arrive_is_given_up_when_its_hold_ends(make_service):
    svc = await make_service(
        rack_cluster() + gang("train", 3), gang_wait_s=5.0, gang_hold_s=12.0, gang_release_on_first_bind=False
    )
    nodes = await filter_all(svc, ["train-0", "train-1", "train-2"])
    first = asyncio.create_task(svc.bind("train-0", nodes["train-0"]))
    await asyncio.sleep(0.05)
    await svc.expire(5.1)
    await first
    await svc.expire(7.0)
    assert svc.store.reservations == {} and svc.plan("default/train") == {}
    reason = svc.scheduler.ledger.entry("default/train").last_reason
    assert (
        "quorum did not reach bind: no new planned pod arrived within 12s (1 of 3 planned pods arrived)"
        in reason
        and "backing off" in reason
    )
    svc.check_invariants()


# -------------------------------------------------------------- coexistence with native gang scheduling
NATIVE_PG = {
    "apiVersion": "scheduling.k8s.io/v1alpha2",
    "kind": "PodGroup",
    "metadata": {"name": "native", "namespace": "default"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
}


async def test_pods_kube_scheduler_gates_natively_are_not_gated_twice(make_service):
    """With --native-gang-scheduling, kube-scheduler's GangScheduling plugin holds pods that name a
    scheduling.k8s.io PodGroup (spec.schedulingGroup) and releases them together; the service
    places them pod by pod, still respecting other gangs' reservations."""
    pods = [make_pod(f"native-{i}", scheduling_group="native") for i in range(2)]  # 2 of minCount 3
    kai = gang("train", 2, cpu="8")
    svc = await make_service(
        [*rack_cluster(racks=1, nodes_per_rack=3), NATIVE_PG, *pods, *kai], gang_native_gang_scheduling=True
    )
    nodes = await filter_all(svc, ["train-0"])  # a KAI gang is still ours: planned and held
    held = set(svc.plan("default/train").values())
    doc = await svc.filter("native-0")
    assert doc["NodeNames"] and not held & set(doc["NodeNames"])  # no quorum gate, reservations kept
    assert await svc.bind("native-0", doc["NodeNames"][0]) == ""  # no barrier: the plugin's Permit was it
    assert "default/native" not in svc.scheduler.ledger.gangs
    assert nodes["train-0"] in held


async def test_without_the_setting_the_same_pods_are_gated_by_the_service(make_service):
    pods = [make_pod(f"native-{i}", scheduling_group="native") for i in range(2)]
    svc = await make_service([*rack_cluster(), NATIVE_PG, *pods])
    doc = await svc.filter("native-0")
    assert doc["NodeNames"] == []
    assert "2 exist, 3 needed for quorum" in next(iter(doc["FailedNodes"].values()))
    assert "not binding it alone" in await svc.bind("native-0", svc.node_names[0])


# -------------------------------------------------------------- a member regrouped mid-release
async def test_a_member_regrouped_while_its_old_gang_binds_it_is_not_planned_twice(make_service, monkeypatch):
    """Seed 1378 of the harness: a-1's pod-group-name was edited to b while a's release was binding
    it. b's filter planned a-1 again, and the ledger's guard answered kube-scheduler with an internal
    error ("a-1 is already planned in gang a"). b waits until that bind has landed or failed."""
    svc = await make_service(rack_cluster() + gang("a", 2) + gang("b", 2, min_member=2)[:2])
    monkeypatch.setattr(svc.cluster, "bind_pod", ApiFaults(svc.cluster, delay_s=0.2))
    nodes = await filter_all(svc, ["a-0", "a-1"])
    binds = [asyncio.create_task(svc.bind(n, nodes[n])) for n in nodes]
    await asyncio.sleep(0.05)  # the release's POSTs are in flight
    assert svc.scheduler.ledger.is_releasing("default/a-1")
    moved = svc.pod("a-1")
    moved["metadata"]["annotations"]["pod-group-name"] = "b"
    svc.cluster.apply(moved)
    doc = await svc.filter("b-0")
    assert not doc["Error"], doc["Error"]
    reason = next(iter(doc["FailedNodes"].values()))
    assert "member default/a-1 is still being bound for gang default/a, which it left" in reason
    await asyncio.gather(*binds)
    # b-0, turned away while a-1's bind was in flight, is brought back when a's release settles
    assert (
        svc.pod("b-0")["metadata"]["annotations"].get("gang-extender.io/nudge", "").startswith("default/b:")
    )
    # a's quorum was split by the edit itself (a-1 landed where a's plan put it, as b's now): what the
    # service answers for is its own state, exact and with no hold left behind
    free_is_exact(svc)
    assert svc.store.reservations == {}


async def test_a_member_regrouped_while_its_refused_binding_was_in_flight_is_not_retried_for_its_old_gang(
    make_service, monkeypatch
):
    """Seed 1378 again, on the code that waits for the bind: the API refused a-1's binding, and the
    edit to b came while it was in flight. A refused member keeps its place for kube-scheduler's retry;
    that retry bound a-1 for a's plan, as b's member, alone. The plan now goes when the release settles,
    and b plans a-1 with its own."""
    svc = await make_service(rack_cluster() + gang("a", 2) + gang("b", 2, min_member=2)[:2])
    monkeypatch.setattr(svc.cluster, "bind_pod", ApiFaults(svc.cluster, delay_s=0.2, fail={"a-1"}))
    nodes = await filter_all(svc, ["a-0", "a-1"])
    binds = [asyncio.create_task(svc.bind(n, nodes[n])) for n in nodes]
    await asyncio.sleep(0.05)  # the release's POSTs are in flight
    moved = svc.pod("a-1")
    moved["metadata"]["annotations"]["pod-group-name"] = "b"
    svc.cluster.apply(moved)
    await asyncio.gather(*binds)
    assert svc.scheduler.ledger.gang_of("default/a-1") is None
    why = "member default/a-1 left the gang's plan while it was bound (it is now default/b)"
    assert why in svc.scheduler.describe("default/a")["lastReason"]
    (told,) = [e["message"] for e in svc.cluster.events if e["reason"] == "GangBindFailed"]
    assert told.endswith(f"; the gang plans again: {why}"), told
    doc = await svc.filter("a-1")  # kube-scheduler's retry: now b's member, b has its quorum of 2
    assert doc["NodeNames"], doc
    assert sorted(svc.plan("default/b")) == ["default/a-1", "default/b-0"]
    free_is_exact(svc)


async def test_a_plan_goes_when_a_kind_listed_late_takes_its_members_out_of_the_gang(make_service):
    """JobSet's CRD installed after the service started: a JobSet's Job was planned as a gang of its
    own (the JobSet's absence said nothing). The kind's first list is in without that JobSet (deleted,
    its pods going with it): the members now wait for it, and the plan goes with no object event to
    bring it (found by review: it stood, and each member was bound for it)."""
    import copy

    from extender.grouping import kai
    from extender.model.group import MembershipState
    from tests.grouping.workloads import expand

    tmpl = {"spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "1"}}}]}}
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "late", "namespace": "default", "uid": "js-uid-1"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "rj0",
                    "replicas": 1,
                    "template": {
                        "metadata": {"annotations": {"kai.scheduler/batch-min-member": "3"}},
                        "spec": {"parallelism": 3, "template": tmpl},
                    },
                }
            ]
        },
    }
    svc = await make_service(rack_cluster())
    svc.store.listed = frozenset(
        {("", "Pod"), ("", "Node"), ("batch", "Job"), ("scheduling.run.ai", "PodGroup")}
    )
    jobs, pods = expand(js)
    for obj in (*jobs, *pods):
        svc.cluster.apply(copy.deepcopy(obj))
    keys = [f"default/{p['metadata']['name']}" for p in pods]
    gang = svc.store.membership(svc.store.pods[keys[0]]).group.key
    await svc.filter(pods[0]["metadata"]["name"])
    assert set(svc.plan(gang)) == set(keys)
    svc.store.now_lists(kai.JOBSET)
    assert {svc.store.membership(svc.store.pods[k]).state for k in keys} == {MembershipState.GROUP_MISSING}
    assert svc.plan(gang) == {}
    assert not svc.store.reservations
    assert svc.scheduler.ledger.entry(gang) is None  # no member left: forgotten, as a deleted group's
    svc.check_invariants()
