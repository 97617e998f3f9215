"""The bound pods' required anti-affinity held against a pod a plan would bind without its own cycle
(state.repelling): which terms select it, kept as pods come, change and go."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.state.repelling import Repelling
from extender.state.store import ClusterStore
from tests.builders import make_node, make_pod

HOSTNAME = "kubernetes.io/hostname"


def repeller(name: str, term: Any, *, namespace: str = "ml", node: str | None = "n0", **meta: Any) -> dict:
    pod = make_pod(name, cpu="1", node=node)
    pod["metadata"] |= {"namespace": namespace, **meta}
    pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return pod


def member(namespace: str = "ml", labels: dict[str, str] | None = None) -> dict:
    pod = make_pod("m", cpu="1")
    pod["metadata"] |= {"namespace": namespace, "labels": labels if labels is not None else {"job": "train"}}
    return pod


TRAIN = {"matchLabels": {"job": "train"}}

# (case, the bound pods, the member, whether a term selects it)
ON_HOST = {"topologyKey": HOSTNAME, "labelSelector": TRAIN}
BY_ZONE = {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": TRAIN}
DB = {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "db"}}}
ODD_SELECTOR = {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": ["x"]}}
GONE = "2026-12-06T00:00:00Z"

# (case, the bound pods, the member, whether a term selects it)
CASES = [
    ("nobody repels", [], member(), False),
    ("a term selecting its labels, its namespace", [repeller("r", ON_HOST)], member(), True),
    ("the same term from another namespace", [repeller("r", ON_HOST, namespace="web")], member(), False),
    ("a term naming the member's namespace",
     [repeller("r", {**ON_HOST, "namespaces": ["ml"]}, namespace="web")], member(), True),
    ("a namespace selector (any namespace may match)",
     [repeller("r", {**ON_HOST, "namespaceSelector": {}}, namespace="web")], member(), True),
    ("a selector for other labels", [repeller("r", DB)], member(), False),
    ("a zone term (kube-scheduler judges the topology)", [repeller("r", BY_ZONE)], member(), True),
    ("a pending pod repels nobody yet", [repeller("r", ON_HOST, node=None)], member(), False),
    ("a terminating pod repels nobody", [repeller("r", ON_HOST, deletionTimestamp=GONE)], member(), False),
    ("a null selector selects nothing", [repeller("r", {"topologyKey": HOSTNAME})], member(), False),
    ("an expression-only selector", [repeller("r", {"topologyKey": HOSTNAME, "labelSelector": {
        "matchExpressions": [{"key": "job", "operator": "In", "values": ["train"]}]}})], member(), True),
    ("two required labels, one missing", [repeller("r", {"topologyKey": HOSTNAME, "labelSelector": {
        "matchLabels": {"job": "train", "team": "b"}}})], member(), False),
    ("two required labels, both there", [repeller("r", {"topologyKey": HOSTNAME, "labelSelector": {
        "matchLabels": {"job": "train", "team": "b"}}})], member(labels={"job": "train", "team": "b"}), True),
    ("many terms for others, one for it", [repeller(f"r{i}", {"topologyKey": HOSTNAME, "labelSelector": {
        "matchLabels": {"app": f"svc-{i}"}}}) for i in range(50)] + [repeller("t", ON_HOST)], member(), True),
    ("a term that is not an object", [repeller("r", "odd")], member(), True),
    ("a selector of another shape", [repeller("r", ODD_SELECTOR)], member(), True),
]  # fmt: skip


@pytest.mark.parametrize(("case", "bound", "pod", "selected"), CASES, ids=[c[0] for c in CASES])
def test_a_bound_pods_anti_affinity_is_held_against_the_pods_it_selects(case, bound, pod, selected) -> None:
    store = ClusterStore()
    store.upsert(make_node("n0"))
    for obj in bound:
        store.upsert(obj)
    assert bool(Repelling(store).against(pod)) is selected  # rebuilt from the store
    fed = ClusterStore()
    fed.upsert(make_node("n0"))
    repelling = Repelling(fed)
    for obj in bound:
        fed.upsert(obj)  # fed by its events
    assert bool(repelling.against(pod)) is selected


def test_terms_are_kept_once_and_go_with_their_last_pod() -> None:
    store = ClusterStore()
    store.upsert(make_node("n0"))
    repelling = Repelling(store)
    term = {"topologyKey": HOSTNAME, "labelSelector": TRAIN}
    a, b = repeller("a", term), repeller("b", copy.deepcopy(term))
    store.upsert(a)
    store.upsert(b)
    assert len(repelling) == 1 and repelling.against(member())
    store.remove(a)
    assert repelling.against(member())  # b still carries it
    changed = copy.deepcopy(b)
    changed["spec"]["affinity"] = {}
    store.upsert(changed)  # its anti-affinity edited away (the API forbids it; a fake may not)
    assert len(repelling) == 0 and not repelling.against(member())
