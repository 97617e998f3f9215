"""What the store keeps of a pod is compact, and reads back as the mapping it was given; capacity is
charged the same whatever order pods and their nodes arrive in."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pytest

from extender.model.cycle import cycle_needed
from extender.model.keys import PodKey, object_key
from extender.model.podaffinity import one_per_node
from extender.state.projection import project
from extender.state.store import ClusterStore, PodRecord, is_live, is_terminal
from tests.state.test_projection import PODS, as_served, node, pod


def shape(value: Any) -> Any:
    """`value` with every mapping's key order and every value's type: what == does not compare."""
    if isinstance(value, dict):
        return [(k, shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return ["list", *(shape(v) for v in value)]
    return (type(value).__name__, value)


ODD = [
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-spec", "namespace": "ns"}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "n", "namespace": "ns"}, "spec": None},
    {"kind": "Pod", "metadata": {"name": "tuple", "namespace": "ns", "labels": {"a": ("b",)}}, "spec": {}},
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dt", "namespace": "ns", "deletionTimestamp": datetime.datetime(2026, 1, 1)},
        "spec": {"nodeName": None},
    },
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"uid": None, "name": 7}, "spec": {"nodeName": ""}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {1: "key not a string"}, "spec": {}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": ""}, "spec": {}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": None}, "spec": {}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "priority": True}, "spec": {"priority": 1}},
]
WHOLE = [as_served(p) for p in PODS]
CASES = [*(project(p) for p in WHOLE), *WHOLE, *ODD]


@pytest.mark.parametrize("obj", CASES)
def test_a_kept_pod_reads_back_as_it_was_given(obj: dict[str, Any]) -> None:
    rec = PodRecord(key=PodKey(object_key(obj)), obj=obj, requests={})
    rec.keep(obj)
    assert shape(rec.obj) == shape(obj)
    whole = PodRecord(key=rec.key, obj=obj, requests={})
    assert (rec.uid, rec.node_name, rec.terminal, rec.live) == (
        whole.uid,
        whole.node_name,
        is_terminal(obj),
        is_live(obj),
    )


def test_the_cycle_a_pod_needs_is_read_from_its_shared_spec_as_from_the_pod() -> None:
    """The store answers `cycle_needed` once per spec template its pods share; every kept shape (served,
    projected with its mark, odd) gets the pod's own answer, first and again from what was kept."""
    store = ClusterStore()
    recs = []
    for i, obj in enumerate(CASES):
        rec = PodRecord(key=PodKey(f"case/{i}"), obj=obj, requests={})
        rec.keep(obj)
        recs.append((rec, cycle_needed(obj)))
    answers = {a for _, a in recs}
    assert "" in answers and len(answers) > 2  # pods that need their own cycle, for several reasons
    for _ in range(2):
        assert [store.cycle_needed(rec) for rec, _ in recs] == [a for _, a in recs]


ODD_AFFINITY = [
    pod("affinity a list", {"affinity": ["x"]}),
    pod("anti a list", {"affinity": {"podAntiAffinity": ["x"]}}),
    pod("anti empty", {"affinity": {"podAntiAffinity": {}}}),
    pod("anti preferred only", {"affinity": {"podAntiAffinity": {"preferredDuringScheduling": [{}]}}}),
    pod("tolerations a number", {"tolerations": 5}),
    pod("node affinity a string", {"affinity": {"nodeAffinity": "x"}}),
]


def _outcome(read: Any, arg: Any) -> Any:
    try:
        return ("answered", read(arg))
    except Exception as exc:  # an odd pod raises where it raised before, the same way
        return ("raised", type(exc))


def test_what_planning_reads_of_a_member_is_read_from_its_shared_spec_as_from_the_pod() -> None:
    """Its eligible nodes (the same mask object: planning tells terms apart by it), whether it must be
    alone on its node, and its status, for every kept shape, twice: read once per spec template its
    workload's pods share, they answer as the pod itself does."""
    store = ClusterStore()
    store.upsert(node("n1", {"taints": [{"key": "t", "effect": "NoSchedule"}]}))
    store.upsert(node("n2"))
    for i, obj in enumerate([*CASES, *ODD_AFFINITY, *(project(as_served(p)) for p in ODD_AFFINITY)]):
        rec = PodRecord(key=PodKey(f"case/{i}"), obj=obj, requests={})
        rec.keep(obj)
        for _ in range(2):
            mask, own = (
                _outcome(store.eligible_mask_of, rec),
                _outcome(store.eligible_mask, obj),
            )
            assert mask[0] == own[0] and (mask[1] is own[1] if mask[0] == "answered" else mask == own), obj
            assert _outcome(store.one_per_node_of, rec) == _outcome(one_per_node, obj), obj
            assert rec.status == obj.get("status")
            assert _outcome(store.cycle_needed, rec) == _outcome(cycle_needed, obj), obj


def test_pods_of_one_workload_share_all_but_their_own_fields() -> None:
    store = ClusterStore()
    for i in range(3):
        p = pod(f"p{i}", {"nodeName": "n1"}, labels={"app": "a"}, uid=f"u{i}")
        store.upsert(project(as_served(p)))
    recs = list(store.pods.values())
    assert len({id(r._top) for r in recs}) == len({id(r._meta) for r in recs}) == 1
    assert len({id(r._spec) for r in recs}) == 1
    assert [r.uid for r in recs] == ["u0", "u1", "u2"]


def test_a_kept_pod_is_no_source_object() -> None:
    """A source that edits its own object in place (the embedded cluster) changes nothing stored."""
    store = ClusterStore()
    p = pod("p", {"nodeName": "n1"}, labels={"app": "a"})
    store.upsert(p)
    before = store.get("", "Pod", "ns", "p")
    p["metadata"]["labels"]["app"] = "changed"
    p["spec"]["containers"].append({"name": "more"})
    assert store.get("", "Pod", "ns", "p") == before


def _free(events: list[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    """Free CPU (millicores) per node once `events` are applied."""
    store = ClusterStore()
    for op, obj in events:
        getattr(store, op)(obj)
    cpu = store.resources.find("cpu")
    return {name: int(store.arrays.free[row, cpu]) for name, row in sorted(store.node_rows.items())}


def _bound(name: str, node_name: str, phase: str = "Running") -> dict[str, Any]:
    return pod(name, {"nodeName": node_name}, {"phase": phase})  # asks 1 cpu


NODE_EVENTS = [("upsert", node("n1")), ("upsert", node("n2"))]  # 8 cpus each
POD_EVENTS = [
    ("upsert", _bound("a", "n1")),
    ("upsert", _bound("b", "n2")),
    ("upsert", _bound("c", "n1", phase="Succeeded")),  # finished: charges nothing
    ("upsert", _bound("d", "n1")),
    ("upsert", _bound("d", "n2")),  # moved before its first node was known
    ("upsert", _bound("e", "n2")),
    ("remove", _bound("e", "n2")),  # gone before its node was known
    ("upsert", _bound("f", "n3")),  # its node never comes
]


@pytest.mark.parametrize("cut", range(len(NODE_EVENTS) + 1))
def test_capacity_is_charged_alike_whether_pods_or_their_nodes_come_first(cut: int) -> None:
    nodes_first = _free(NODE_EVENTS + POD_EVENTS)
    assert nodes_first == {"n1": 7000, "n2": 6000}
    for order in itertools.permutations([NODE_EVENTS[:cut], POD_EVENTS, NODE_EVENTS[cut:]]):
        assert _free([e for part in order for e in part]) == nodes_first, order


def test_a_node_removed_and_back_charges_its_pods_again() -> None:
    events = [("upsert", node("n1")), ("upsert", _bound("a", "n1")), ("upsert", _bound("b", "n1"))]
    events += [("remove", node("n1")), ("remove", _bound("a", "n1")), ("upsert", node("n1"))]
    assert _free(events) == {"n1": 7000}


def test_a_gang_members_mapping_is_built_once_until_it_changes() -> None:
    """Planning reads every member of a large gang on each call; a plain pod's is not kept."""
    p = project(as_served(pod("p", {"nodeName": "n1"})))
    rec = PodRecord(key=PodKey("ns/p"), obj=p, requests={})
    rec.keep(p)
    assert rec.obj is not rec.obj, "a plain pod's mapping is built on each read, never kept"
    rec.membership = object()  # type: ignore[assignment]  # a kept membership: a gang member
    first = rec.obj
    assert rec.obj is first
    changed = project(as_served(pod("p", {"nodeName": "n2"})))
    rec.keep(changed)
    assert rec.obj is not first and rec.obj == changed


def test_a_request_vector_is_the_callers_own_and_follows_a_resource_a_node_begins_to_offer():
    from tests.builders import make_node

    store = ClusterStore()
    store.upsert(make_node("plain"))
    requests = {"cpu": 2000, "example.com/fpga": 1}
    vec, missing = store.request_vector(requests)
    assert missing == ["example.com/fpga"]
    vec[:] = 7  # the caller's to change: the next caller sees none of it
    again, _ = store.request_vector(requests)
    assert int(again[store.resources.find("cpu")]) == 2000
    fpga = make_node("fpga")
    fpga["status"]["allocatable"]["example.com/fpga"] = "2"
    store.upsert(fpga)
    vec, missing = store.request_vector(requests)
    assert missing == []
    assert int(vec[store.resources.find("example.com/fpga")]) == 1
