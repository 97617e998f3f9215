"""When this process's watch lags kube-scheduler's: neither a preemptor's retry nor a parked pod may
be lost to it, and no node is passed on room that is not there yet.

kube-scheduler retries the preemptor as soon as its own cache shows the victim deleted; this service
follows the same watch and may be a few milliseconds behind. Were its filter's refusal of the
nominated node final then, kube-scheduler would preempt a second time elsewhere (an e2e run on
1.36.2 saw two plain pods evicted for one). So the refusal is answered as a retry (lagging.py), and
kube-scheduler tries the node again after its backoff. The victim's room is not counted free before
this cache sees it go: a kube-scheduler whose cache lags on other pods may offer the node while the
victim still runs out its grace period there (the interleavings harness, shifted stream, seed 174).
And a pod whose bind was refused because the cache had not seen it yet is brought back as soon as
it has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from extender.scheduling.decisions import BindVerdict, Verdict
from tests.builders import make_node, make_pod
from tests.scheduling.worlds import ClockedWorld


def pod(name: str, node: str | None, priority: int, *, nominated: str | None = None) -> dict[str, Any]:
    p = make_pod(name, cpu="4", node=node, uid=f"uid-{name}")
    p["spec"]["priority"] = priority
    if nominated:
        p.setdefault("status", {})["nominatedNodeName"] = nominated
    return p


class World(ClockedWorld):
    """n1 holds victim v1, n2 holds o2; both full. `urgent` (and `rival`) wait for 4 cpu."""

    def __init__(self) -> None:
        super().__init__(
            [
                make_node("n1", cpu="4"),
                make_node("n2", cpu="4"),
                pod("v1", "n1", 0),
                pod("o2", "n2", 0),
                pod("urgent", None, 1000),
                pod("rival", None, 1000),
            ]
        )

    def preempt(self, name: str, victims: dict[str, list[str]]) -> set[str]:
        candidates = {
            n: {"Pods": [{"UID": f"uid-{v}"} for v in vs], "NumPDBViolations": 0} for n, vs in victims.items()
        }
        return set(self.scheduler.preempt(self.cluster.get("", "Pod", "default", name), candidates).victims)

    def nominate(self, name: str, node: str) -> None:
        p = self.cluster.get("", "Pod", "default", name)
        p.setdefault("status", {})["nominatedNodeName"] = node
        self.cluster.apply(p)

    def filter(self, name: str, nodes: list[str]) -> tuple[list[str], str]:
        """(the nodes passed, the node a refusal is answered as a retry on: "" when it stands)."""
        decision = self.scheduler.filter(self.cluster.get("", "Pod", "default", name), nodes)
        passed = list(decision.passed) if decision.verdict is Verdict.PASS else []
        return passed, decision.lagging_on

    def terminate(self, name: str) -> None:
        p = self.cluster.get("", "Pod", "default", name)
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.cluster.apply(p)

    def bind(self, name: str, node: str) -> BindVerdict:
        return self.scheduler.bind(namespace="default", name=name, uid=f"uid-{name}", node=node).verdict

    def delete(self, name: str) -> None:
        self.cluster.delete("", "Pod", "default", name)

    def bind_elsewhere(self, name: str, node: str) -> None:
        p = self.cluster.get("", "Pod", "default", name)
        p["spec"]["nodeName"] = node
        self.cluster.apply(p)


Step = Callable[[World], None]

PREEMPTED: list[Step] = [
    lambda w: w.preempt("urgent", {"n1": ["v1"], "n2": ["o2"]}),
    lambda w: w.nominate("urgent", "n1"),
]

# (case, steps before the look, pod asking, nodes offered, nodes passed, the node a retry is answered on)
CASES: list[tuple[str, list[Step], str, list[str], list[str], str]] = [
    (
        "no preemption: the full node kube-scheduler offered is refused as a retry",
        [],
        "urgent",
        ["n1"],
        [],
        "n1",
    ),
    (
        "nominated to n1, its victim still cached there: refused as a retry, not preempted for again",
        PREEMPTED,
        "urgent",
        ["n1"],
        [],
        "n1",
    ),
    (
        "its victim running out its grace period: the node is still full",
        [*PREEMPTED, lambda w: w.terminate("v1")],
        "urgent",
        ["n1", "n2"],
        [],
        "n1",
    ),
    (
        "the victim gone from the cache: the plain fit answers",
        [*PREEMPTED, lambda w: w.delete("v1")],
        "urgent",
        ["n1", "n2"],
        ["n1"],
        "",
    ),
    (
        "room freed by the victim and taken since by another pod stays taken",
        [*PREEMPTED, lambda w: w.delete("v1"), lambda w: w.bind_elsewhere("rival", "n1")],
        "urgent",
        ["n1"],
        [],
        "n1",
    ),
    (
        "nominated to n1 where a reservation holds room too: still a retry (the victims' going is news)",
        [
            *PREEMPTED,
            lambda w: w.scheduler.ledger.hold("default/rival", "n1", w.store.pods["default/rival"].requests),
        ],
        "urgent",
        ["n1"],
        [],
        "n1",
    ),
    (
        "retries given up before the preemption: the preemption starts a new run of them",
        [
            lambda w: w.filter("urgent", ["n1"]),
            lambda w: setattr(w, "clock_s", w.clock_s + 31),
            lambda w: w.filter("urgent", ["n1"]),
            *PREEMPTED,
        ],
        "urgent",
        ["n1"],
        [],
        "n1",
    ),
    (
        "another pod is not passed on the preemptor's victims either",
        [*PREEMPTED, lambda w: w.nominate("rival", "n1")],
        "rival",
        ["n1"],
        [],
        "n1",
    ),
]


@pytest.mark.parametrize(
    ("case", "steps", "asking", "offered", "passed", "retry_on"), CASES, ids=[c[0] for c in CASES]
)
def test_a_preemptor_is_passed_only_where_it_fits_and_its_refusal_is_retried(
    case: str, steps: list[Step], asking: str, offered: list[str], passed: list[str], retry_on: str
) -> None:
    w = World()
    for step in steps:
        step(w)
    assert w.filter(asking, offered) == (passed, retry_on), case


def test_bind_on_the_nominated_node_waits_for_the_victim_to_leave_the_cache() -> None:
    w = World()
    assert w.preempt("urgent", {"n1": ["v1"]}) == {"n1"}
    w.nominate("urgent", "n1")
    assert w.bind("urgent", "n1") is BindVerdict.REFUSE, "the victim still holds the node"
    assert "uid-urgent" in w.scheduler.evictions, "room is still coming for it"
    w.delete("v1")
    assert w.bind("urgent", "n1") is BindVerdict.NOW
    assert "uid-urgent" not in w.scheduler.evictions, "bound, it waits for nothing"


def test_a_deleted_preemptor_leaves_nothing_behind_and_memory_is_bounded() -> None:
    w = World()
    w.preempt("urgent", {"n1": ["v1"]})
    assert "uid-urgent" in w.scheduler.evictions
    w.delete("urgent")
    assert len(w.scheduler.evictions) == 0
    w.scheduler.evictions.max_preemptors = 2
    for i in range(5):
        w.scheduler.evictions.record(w.store, f"p{i}", {"n1": {"Pods": [{"UID": "uid-v1"}]}})
    assert (
        len(w.scheduler.evictions) == 2
        and "p4" in w.scheduler.evictions
        and "p0" not in w.scheduler.evictions
    )


def test_a_pod_refused_at_bind_for_want_of_it_in_the_cache_is_brought_back_once_cached() -> None:
    """After a watch cut kube-scheduler's pod watch may run ahead of this process's: a bind for a pod
    the cache has not seen is refused, kube-scheduler parks the pod, and nothing else would retry it
    for up to a minute (an e2e fault test on 1.20.2 waited 82 s)."""
    w = World()
    late = pod("late", None, 0)
    late["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "0"
    refused = w.scheduler.bind(namespace="default", name="late", uid="uid-late", node="n1")
    assert refused.verdict is BindVerdict.REFUSE and "not in the extender's cache" in refused.message
    gone = w.scheduler.bind(namespace="default", name="never", uid="uid-never", node="n1")
    assert gone.verdict is BindVerdict.REFUSE
    assert w.scheduler.telling.quorum_arrived() == [], "nothing arrived yet"
    w.cluster.apply(late)
    nudges = [(e.kind, e.name) for e in w.scheduler.telling.quorum_arrived()]
    assert nudges == [("nudge", "late")]
    assert w.scheduler.telling.quorum_arrived() == [], "once"
    # the one never seen is forgotten after a while, so the memory stays bounded
    assert "default/never" in w.scheduler.ledger.short_of_cache
    w.clock_s += 301
    w.cluster.apply(pod("another", None, 0))
    w.scheduler.telling.quorum_arrived()
    assert w.scheduler.ledger.short_of_cache == {}
