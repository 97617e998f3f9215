"""Plain pods' filter fast path (Scheduler.plain_refusals, server/passthrough.py) answers as the general path.

kube-scheduler offers only nodes its own fit passed on its cache. A plain pod is answered with the
offered list itself minus the nodes where it does not fit: all of them when they are few (exactly the
general path), else those where this cache knows more (held, cordoned, or changed within the settle
time). Unknown names stay HTTP 400 on either path, as nodes come and go.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from extender.scheduling.lagging import retry_text
from extender.server.app import METRICS
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod

NODES = ["n0", "n1", "n2", "n3", "n4", "n5"]


def world() -> list[dict]:
    """n0 full (a bound 8-cpu pod), n1 cordoned, n2..n5 empty; gang g (2 x 6 cpu) and plain pods."""
    return [
        *(make_node(n, cpu="8", unschedulable=(n == "n1")) for n in NODES),
        make_pod("big", cpu="8", node="n0"),
        make_kai_podgroup("g", min_member=2),
        gang_pod("g-0", "g", cpu="6"),
        gang_pod("g-1", "g", cpu="6"),
        make_pod("p", cpu="4"),
        make_pod("q", cpu="4"),
    ]


async def passed_by(svc, name: str, offered: list[str]) -> list[str]:
    status, body = await post_filter(svc, name, offered)
    assert status == 200, body
    return orjson.loads(body)["NodeNames"]


def fast_calls(svc) -> float:
    return svc.app[METRICS].plain_fast_path._value.get()


async def post_filter(svc, name: str, offered: list[str]) -> tuple[int, bytes]:
    doc = {"Pod": svc.pod(name), "Nodes": None, "NodeNames": offered}
    resp = await svc.client.post("/filter", data=orjson.dumps(doc))
    return resp.status, await resp.read()


@pytest.mark.parametrize(
    ("offered", "exact_max", "passed", "fast"),
    [
        # few refusals: every one of them is refused, as the general path refuses them
        (NODES, 64, ["n4", "n5"], True),
        (["n5", "n4", "n5"], 64, ["n5", "n4", "n5"], True),  # order and repeats kept: the bytes echoed
        (["n0", "n4"], 64, ["n4"], True),
        # trusting kube-scheduler's fit: held (g's plan) and cordoned nodes are still refused; n0 is
        # full, but kube-scheduler's cache shows it (nothing changed there lately): it never offers it
        (["n1", "n2", "n3", "n4", "n5"], 0, ["n4", "n5"], True),
        (["n4", "n5"], 0, ["n4", "n5"], True),
        # refused everywhere, or nothing offered: the general path says why
        (["n0", "n1", "n2"], 64, [], False),
        ([], 64, [], False),
    ],
)
async def test_the_fast_path_answers_what_the_general_path_answers(
    make_service, offered, exact_max, passed, fast
):
    svc = await make_service(world())
    node, reason = await svc.schedule("g-0")  # plans g: n2 and n3 are held for it
    assert node is not None, reason
    assert sorted(svc.plan("default/g").values()) == ["n2", "n3"]
    general = svc.scheduler.filter(svc.pod("p"), offered)
    svc.scheduler.filtering.exact_refusals_max = exact_max
    before = fast_calls(svc)
    status, body = await post_filter(svc, "p", offered)
    assert status == 200
    doc = orjson.loads(body)
    assert doc["NodeNames"] == passed
    if exact_max:
        assert doc["NodeNames"] == general.passed
    assert fast_calls(svc) - before == (1 if fast else 0)
    if not passed:
        reasons = {**doc["FailedNodes"], **doc["FailedAndUnresolvableNodes"]}
        assert general.reason
        if general.lagging_on:  # n0 is full here: offered, kube-scheduler's cache may be the one ahead
            assert not reasons and doc["Error"] == retry_text(general.reason, general.lagging_on)
        else:
            assert set(reasons.values()) == ({general.reason} if offered else set())


async def test_unknown_names_are_a_400_on_the_fast_path_too_as_the_node_set_changes(make_service):
    svc = await make_service(world())
    status, _ = await post_filter(svc, "p", ["n4", "n5"])
    assert status == 200
    status, body = await post_filter(svc, "p", ["n4", "ghost"])
    assert status == 400
    assert body.decode().strip() == "1 node name(s) unknown to the extender's cluster cache: 'ghost'"
    svc.cluster.delete("", "Node", None, "n5")
    status, body = await post_filter(svc, "p", ["n4", "n5"])
    assert status == 400
    assert "unknown to the extender's cluster cache: 'n5'" in body.decode()
    svc.cluster.apply(make_node("ghost", cpu="8"))  # added: known from now on, on the fast path
    fast = fast_calls(svc)
    assert await passed_by(svc, "p", ["ghost", "n4"]) == ["ghost", "n4"]
    assert fast_calls(svc) == fast + 1


async def test_a_node_filled_moments_ago_is_refused_until_kube_schedulers_cache_can_show_it(make_service):
    svc = await make_service(world())
    svc.scheduler.filtering.exact_refusals_max = 0  # trust kube-scheduler's fit wherever it may
    assert await passed_by(svc, "p", ["n4"]) == ["n4"]
    assert await svc.bind("p", "n4") == ""
    assert svc.node_of("p") == "n4"
    svc.cluster.apply(make_pod("r", cpu="4"))
    assert await passed_by(svc, "r", ["n4", "n5"]) == ["n4", "n5"]
    assert await svc.bind("r", "n4") == ""
    # n4 is full now, but a lagging kube-scheduler still offers it: it is refused while it settles
    assert await passed_by(svc, "q", ["n4", "n5"]) == ["n5"]
    await svc.expire(svc.scheduler.filtering.settling.settle_s + 0.1)
    # settled: kube-scheduler's cache shows n4 full and never offers it; were it offered anyway, the
    # bind verb still refuses it
    assert await passed_by(svc, "q", ["n5"]) == ["n5"]
    assert "no longer fits on n4" in await svc.bind("q", "n4")


async def test_a_gangs_release_keeps_its_nodes_refused_to_plain_pods_while_they_settle(make_service):
    svc = await make_service(world())
    svc.scheduler.filtering.exact_refusals_max = 0
    await svc.schedule("g-0")
    planned = svc.plan("default/g")
    node1, _ = await svc.schedule("g-1")
    waiting = asyncio.create_task(svc.bind("g-0", planned["default/g-0"]))
    await asyncio.sleep(0.05)
    assert await svc.bind("g-1", node1) == ""
    assert await waiting == ""
    gang_nodes = sorted({svc.node_of("g-0"), svc.node_of("g-1")})
    assert gang_nodes == ["n2", "n3"] and svc.store.reservations == {}
    # the service bound them itself; a kube-scheduler that has not seen it offers their nodes
    assert await passed_by(svc, "p", ["n2", "n3", "n4"]) == ["n4"]
    svc.check_invariants()


async def test_names_written_with_escapes_are_decoded_before_they_are_judged(make_service):
    svc = await make_service(world())

    async def post_raw(names: list[str], escaped: bytes, as_: bytes) -> tuple[int, bytes]:
        doc = {"Pod": svc.pod("p"), "Nodes": None, "NodeNames": names}
        resp = await svc.client.post("/filter", data=orjson.dumps(doc).replace(escaped, as_))
        return resp.status, await resp.read()

    # n0 (full) spelled \u006e0: still n0, still refused
    status, body = await post_raw(["n0", "n4"], b'"n0"', b'"\\u006e0"')
    assert status == 200 and orjson.loads(body)["NodeNames"] == ["n4"]
    # an unknown name spelled with an escape is still unknown
    status, body = await post_raw(["n4", "gh"], b'"gh"', b'"\\u0067h"')
    assert status == 400 and "unknown to the extender's cluster cache: 'gh'" in body.decode()


async def test_with_queues_in_use_a_plain_pod_takes_the_general_path_and_its_queue_limit_holds(make_service):
    queue = {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": "team-a"},
        "spec": {"resources": {"cpu": {"quota": 4000, "limit": 4000}}},
    }
    labelled = [make_pod(n, cpu="4", labels={"kai.scheduler/queue": "team-a"}) for n in ("a1", "a2")]
    svc = await make_service([*(make_node(n, cpu="8") for n in NODES), queue, *labelled])
    node, reason = await svc.schedule("a1")
    assert node is not None, reason
    assert await svc.bind("a1", node) == ""
    assert svc.node_of("a1") == node
    before = fast_calls(svc)
    status, body = await post_filter(svc, "a2", NODES)
    assert status == 200
    doc = orjson.loads(body)
    reasons = set(doc["FailedNodes"].values())
    assert doc["NodeNames"] == [] and reasons == {
        "pod default/a2: queue team-a: cpu limit 4000m, in use 4000m, pod needs 4000m"
    }, doc
    assert fast_calls(svc) == before, "a plain pod counts against its queue: never the fast path"
