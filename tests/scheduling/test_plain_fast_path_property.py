"""The plain pods' fast path never passes what the cache forbids, on random clusters and offered lists.

A random cluster (nodes of random size, some cordoned, some partly used by bound pods), a gang whose
plan holds some nodes, a plain pod of random size, and an offered list as kube-scheduler may send it
(any subset, shuffled, names repeated, now and then a name the cache does not hold, now and then
written with an escape). The fast path (server/passthrough.py) and the general path
(`Scheduler.filter`) judge the same call:

- a name the cache does not hold is an error on both;
- when the cache refuses few rows (`exact_refusals_max`), the fast path answers exactly what the
  general path does (or leaves the call to it);
- always, the fast path passes only offered names, in their order, and never a node that is cordoned,
  or held for the gang or settling where the pod does not fit the cache's free room.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.scheduling.decisions import UnknownNodesError
from extender.scheduling.ledger import GangLedger
from extender.scheduling.scheduler import Scheduler
from extender.server.passthrough import Passthrough
from extender.state.embedded import EmbeddedCluster
from extender.state.store import ClusterStore
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod


@st.composite
def worlds(draw: st.DrawFn) -> dict:
    n = draw(st.integers(min_value=2, max_value=10))
    nodes = [
        {
            "name": f"n{i}",
            "cpu": draw(st.integers(min_value=2, max_value=12)),
            "used": draw(st.integers(min_value=0, max_value=12)),
            "cordoned": draw(st.booleans()) and draw(st.booleans()),
        }
        for i in range(n)
    ]
    return {
        "nodes": nodes,
        "gang_cpu": draw(st.integers(min_value=1, max_value=8)),
        "pod_cpu": draw(st.integers(min_value=1, max_value=10)),
        "offered": draw(st.lists(st.integers(min_value=0, max_value=n + 1), max_size=3 * n)),
        "escaped": draw(st.booleans()) and draw(st.booleans()),
        "exact_max": draw(st.sampled_from([0, 2, 64])),
    }


def build(w: dict) -> tuple[EmbeddedCluster, Scheduler]:
    objects: list[dict] = []
    for spec in w["nodes"]:
        objects.append(make_node(spec["name"], cpu=str(spec["cpu"]), unschedulable=spec["cordoned"]))
        used = min(spec["used"], spec["cpu"])
        if used:
            objects.append(make_pod(f"on-{spec['name']}", cpu=str(used), node=spec["name"]))
    objects += [
        make_kai_podgroup("g", min_member=2),
        gang_pod("g-0", "g", cpu=str(w["gang_cpu"])),
        gang_pod("g-1", "g", cpu=str(w["gang_cpu"])),
        make_pod("p", cpu=str(w["pod_cpu"])),
    ]
    store = ClusterStore()
    cluster = EmbeddedCluster(objects)
    cluster.attach(store)
    ledger = GangLedger(store, wait_s=5, backoff_initial_s=1, backoff_max_s=10, clock=lambda: 0.0)
    scheduler = Scheduler(store, ledger)
    scheduler.filter(cluster.get("", "Pod", "default", "g-0"), sorted(store.node_rows))  # plans g if it fits
    scheduler.filtering.exact_refusals_max = w["exact_max"]
    return cluster, scheduler


def offered_names(w: dict) -> list[str]:
    n = len(w["nodes"])
    return [f"n{i}" if i < n else f"ghost-{i}" for i in w["offered"]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=worlds())
def test_the_fast_path_never_passes_what_the_cache_forbids(w: dict) -> None:
    cluster, scheduler = build(w)
    store = scheduler.store
    pod = cluster.get("", "Pod", "default", "p")
    offered = offered_names(w)
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": offered})
    if w["escaped"] and offered:
        body = body.replace(b'"n', b'"\\u006e')  # every name spelled with an escape: the same names
    unknown = any(name not in store.node_rows for name in offered)
    try:
        general = scheduler.filter(pod, offered).passed
    except UnknownNodesError:
        general = None
    assert (general is None) == unknown
    try:
        reply = Passthrough(scheduler).reply(body, pod)
    except UnknownNodesError:
        assert unknown
        return
    assert not unknown, "a name the cache does not hold passed the fast path"
    if reply is None:
        return  # left to the general path
    passed = orjson.loads(reply)["NodeNames"]
    # only offered names, in their order, repeats kept
    it = iter(offered)
    assert all(any(name == o for o in it) for name in passed)
    request = store.request_vector(scheduler.view.requests_of(pod, "default/p", pod["metadata"]["uid"]))[0]
    held = {res.row for res in store.reservations.values()}
    settling = set(scheduler.filtering.settling.rows().tolist())
    for name in passed:
        row = store.node_rows[name]
        assert store.arrays.schedulable[row], f"{name} is cordoned"
        if row in held or row in settling:
            assert (store.arrays.free[row] >= request).all(), f"{name} is held or settling and too full"
    # exact when the rows refused over the whole cache are few (`Scheduler.plain_refusals`); else only
    # the rows where this cache may know more than kube-scheduler's are refused
    arrays = store.arrays
    unfit = [r for r in store.row_names if not (arrays.schedulable[r] and (arrays.free[r] >= request).all())]
    if len(unfit) <= w["exact_max"]:
        assert passed == [n for n in offered if n in general]


@pytest.mark.parametrize("exact_max", [0, 64])
def test_the_property_meets_holds_and_cordons(exact_max: int) -> None:
    """The random worlds do reach the cases that matter: a held node and a cordoned one offered."""
    w = {
        "nodes": [
            {"name": "n0", "cpu": 8, "used": 0, "cordoned": True},
            {"name": "n1", "cpu": 8, "used": 0, "cordoned": False},
            {"name": "n2", "cpu": 8, "used": 0, "cordoned": False},
            {"name": "n3", "cpu": 8, "used": 6, "cordoned": False},
        ],
        "gang_cpu": 6,
        "pod_cpu": 4,
        "offered": [0, 1, 2, 3, 3],
        "escaped": False,
        "exact_max": exact_max,
    }
    cluster, scheduler = build(w)
    assert len(scheduler.store.reservations) == 2  # g's plan holds two of n1, n2 (6 of 8 cpu each)
    pod = cluster.get("", "Pod", "default", "p")
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": offered_names(w)})
    reply = Passthrough(scheduler).reply(body, pod)
    # n0 cordoned, n1 and n2 held with 2 cpu left; n3 too full: refused in exact mode; trusted (kube-
    # scheduler's own fit ran) when refusals may not be exact
    passed = None if reply is None else orjson.loads(reply)["NodeNames"]
    assert passed in (None, [] if exact_max else ["n3", "n3"])
