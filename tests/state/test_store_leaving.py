"""The store's index of bound pods being deleted, per node (`leaving_on`): kept by every event."""

from __future__ import annotations

import copy

from extender.state.store import ClusterStore
from tests.builders import make_node, make_pod


def terminating(pod: dict) -> dict:
    out = copy.deepcopy(pod)
    out["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return out


def test_a_terminating_pod_is_leaving_its_node_until_it_goes_or_the_node_does() -> None:
    store = ClusterStore()
    store.upsert(make_node("n0"))
    running = make_pod("a", node="n0")
    store.upsert(running)
    store.upsert(make_pod("b", node="n0"))
    assert store.leaving_on("n0") == []
    store.upsert(terminating(running))
    assert [r.key for r in store.leaving_on("n0")] == ["default/a"]
    store.remove(terminating(running))
    assert store.leaving_on("n0") == []
    store.upsert(terminating(make_pod("c", node="n0")))
    assert [r.key for r in store.leaving_on("n0")] == ["default/c"]
    store.remove(make_node("n0"))
    assert store.leaving_on("n0") == []
    store.upsert(make_node("n0"))  # registered again: its pods charge it anew
    assert [r.key for r in store.leaving_on("n0")] == ["default/c"]
    assert store.leaving_on("nowhere") == []
