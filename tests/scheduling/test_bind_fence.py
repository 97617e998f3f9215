"""The start-up bind fence: a process killed with binding POSTs in flight may have them land after
the next process has listed the cluster, and no cache sees a binding before it lands. For
`bind_fence_s` after start-up the service therefore sends no binding: a single pod keeps its room
held while its POST waits, a planned gang member arrives at its barrier only once the fence is over,
and a predecessor's binding that lands meanwhile gives back (or replans) whatever it over-fills.

The randomized form is `test_interleavings.py::test_killed_mid_release_*`; these are its cases
one by one, on a fake clock.
"""

from __future__ import annotations

import asyncio

import pytest

from extender.sim.cluster import topology
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod

FENCE_S = 5.0
RACK = {"topology": "dc", "requiredTopologyLevel": "rack"}


def two_racks(cpu: str = "4") -> list[dict]:
    return [
        make_node("a0", cpu=cpu, rack="ra", block="b0"),
        make_node("a1", cpu=cpu, rack="ra", block="b0"),
        make_node("b0", cpu=cpu, rack="rb", block="b0"),
        make_node("b1", cpu=cpu, rack="rb", block="b0"),
        topology("dc"),
    ]


async def start(make_service, objects, *, fence_s: float = FENCE_S):
    svc = await make_service(objects, source_bind_fence_s=fence_s)
    # the kernels warm up in a thread; a failure formatted meanwhile can trip CPython 3.11's AST state
    for _ in range(1200):
        if (await svc.client.get("/readyz")).status == 200:
            break
        await asyncio.sleep(0.05)
    return svc


def launch(svc, name: str, node: str) -> asyncio.Task[str]:
    return asyncio.get_running_loop().create_task(svc.bind(name, node))


async def settle(n: int = 30) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def predecessor_binds(svc, name: str, node: str) -> None:
    """A binding the killed process had sent lands at the API server now (the watch delivers it)."""
    await type(svc.cluster).bind_pod(
        svc.cluster, namespace="default", name=name, uid=svc.pod(name)["metadata"]["uid"], node=node
    )


async def test_a_plain_pod_bind_waits_out_the_fence_holding_its_room(make_service):
    svc = await start(make_service, [*two_racks(), make_pod("p", cpu="3"), make_pod("q", cpu="3")])
    call = launch(svc, "p", "a0")
    await settle()
    assert not call.done(), "a bind inside the fence is sent nowhere yet"
    assert svc.node_of("p") is None
    assert "default/p" in svc.store.reservations  # its room is held while it waits
    doc = await svc.filter("q", ["a0"])
    assert doc["NodeNames"] == [], "the held room is not offered to another pod"
    await svc.expire(FENCE_S)
    assert await call == ""
    assert svc.node_of("p") == "a0"
    metrics = await (await svc.client.get("/metrics")).text()
    assert "gang_extender_bind_fence_waits_total 1.0" in metrics
    svc.check_invariants()


async def test_a_predecessor_binding_landing_in_the_fence_takes_the_room_back(make_service):
    svc = await start(make_service, [*two_racks(), make_pod("p", cpu="3"), make_pod("old", cpu="3")])
    call = launch(svc, "p", "a0")
    await settle()
    await predecessor_binds(svc, "old", "a0")  # filled a0 before this process's POST could go out
    assert "default/p" not in svc.store.reservations, "the over-filled node's held room is given back"
    svc.check_invariants()
    await svc.expire(FENCE_S)
    error = await call
    assert "no longer fits on a0" in error
    assert svc.node_of("p") is None and svc.node_of("old") == "a0"
    svc.check_invariants()


async def test_gang_members_arrive_once_the_fence_is_over_and_a_landing_replans_them(make_service):
    """The predecessor had released the gang in rack rb; this process planned it in ra. Two of the
    old bindings land inside the fence: the plan is dropped, and the gang is bound whole in rb."""
    objs = [*two_racks(), make_kai_podgroup("g", min_member=3, topology=RACK)]
    objs += [gang_pod(f"g-{i}", "g", cpu="2") for i in range(3)]
    svc = await start(make_service, objs)
    # steer this process's plan into rack ra: rb is offered to no member
    assert (await svc.filter("g-0", ["a0", "a1"]))["NodeNames"]
    plan = svc.plan("default/g")
    assert {n[0] for n in plan.values()} == {"a"}
    calls = {pk.split("/")[1]: launch(svc, pk.split("/")[1], node) for pk, node in plan.items()}
    await settle()
    assert not any(c.done() for c in calls.values()), "members wait for the fence, not at a barrier"
    await predecessor_binds(svc, "g-1", "b0")
    await predecessor_binds(svc, "g-2", "b1")
    await settle()
    assert svc.plan("default/g") == {}, "a member bound outside the plan drops the plan"
    assert not svc.store.reservations
    await svc.expire(FENCE_S)
    answers = {name: await c for name, c in calls.items()}
    assert answers["g-1"].startswith("pod default/g-1 is already bound to b0") or answers["g-1"] == ""
    doc = await svc.filter("g-0", svc.node_names)
    assert set(doc["NodeNames"]) <= {"b0", "b1"}, doc  # inside the landed members' rack
    assert await svc.bind("g-0", doc["NodeNames"][0]) == ""
    assert {svc.node_of(f"g-{i}")[0] for i in range(3)} == {"b"}
    svc.check_invariants()


async def test_a_member_beyond_quorum_is_not_bound_outside_the_domain_fixed_meanwhile(make_service):
    """Its filter passed a node in rack ra while no member was bound; the quorum then landed in rb
    (a predecessor's release): binding it in ra would split the gang over two racks."""
    objs = [*two_racks(), make_kai_podgroup("g", min_member=2, topology=RACK)]
    objs += [gang_pod(f"g-{i}", "g", cpu="1") for i in range(3)]
    svc = await start(make_service, objs)
    await predecessor_binds(svc, "g-0", "b0")
    await predecessor_binds(svc, "g-1", "b1")
    await svc.expire(FENCE_S)
    error = await svc.bind("g-2", "a0")
    assert "outside the topology domain" in error
    assert svc.node_of("g-2") is None
    assert await svc.bind("g-2", "b0") == ""
    svc.check_invariants()


@pytest.mark.parametrize(
    ("case", "fence_s", "expect"),
    [
        ("already bound: answered at once", FENCE_S, ""),
        ("a fence longer than the call: answered at once, nothing held", 60.0, "--bind-fence-s"),
        ("no fence: bound at once", 0.0, ""),
    ],
)
async def test_calls_that_do_not_wait(make_service, case, fence_s, expect):
    svc = await start(make_service, [*two_racks(), make_pod("p", cpu="1")], fence_s=fence_s)
    if case.startswith("already bound"):
        await predecessor_binds(svc, "p", "a0")
    error = await asyncio.wait_for(svc.bind("p", "a0"), 5.0)  # real seconds: it must not wait
    assert (expect in error) if expect else error == "", error
    assert not svc.store.reservations
    if not expect:
        assert svc.node_of("p") == "a0"
    svc.check_invariants()


async def test_a_member_left_out_of_the_plan_landing_in_another_rack_replans_the_rest_with_it(make_service):
    """The plan holds the quorum (two of three) in rack ra; the third member, in no plan, is bound
    by the predecessor in rb. Releasing the plan after the fence would split the gang over two
    racks: the landing drops the plan, and the replan goes where the bound member is."""
    objs = [*two_racks(), make_kai_podgroup("g", min_member=2, topology=RACK)]
    objs += [gang_pod(f"g-{i}", "g", cpu="1") for i in range(3)]
    svc = await start(make_service, objs)
    assert (await svc.filter("g-0", ["a0", "a1"]))["NodeNames"]
    plan = svc.plan("default/g")
    assert {n[0] for n in plan.values()} == {"a"} and len(plan) == 2, plan
    outside = next(f"g-{i}" for i in range(3) if f"default/g-{i}" not in plan)
    calls = {pk.split("/")[1]: launch(svc, pk.split("/")[1], node) for pk, node in plan.items()}
    await settle()
    await predecessor_binds(svc, outside, "b0")
    await settle()
    assert svc.plan("default/g") == {}, "a member bound outside the plan's rack drops the plan"
    await svc.expire(FENCE_S)
    for c in calls.values():
        await c
    pending = [f"g-{i}" for i in range(3) if svc.node_of(f"g-{i}") is None]
    for name in pending:
        doc = await svc.filter(name, svc.node_names)
        assert set(doc["NodeNames"]) <= {"b0", "b1"}, doc
        if doc["NodeNames"]:
            assert await svc.bind(name, doc["NodeNames"][0]) == ""
    assert {svc.node_of(f"g-{i}")[0] for i in range(3) if svc.node_of(f"g-{i}")} == {"b"}
    svc.check_invariants()
