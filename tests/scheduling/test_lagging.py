"""A refusal this cache may owe to lagging kube-scheduler's is answered as an error kube-scheduler
retries after its backoff (scheduling/lagging.py), never as a plain refusal that parks the pod.

The defect it mends (a CI run of the holds e2e on 1.37.2): the small gang on the held rack ended,
kube-scheduler saw it go and offered the rack to the large gang's member before this service's watch
had shown the end; the service refused, and since the member's other nodes had failed
NodeResourcesFit, kube-scheduler parked it where neither the end it had already seen nor the
service's annotation nudge brings it back: the gang waited for the five-minute flush.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from extender.model.keys import pod_key
from extender.model.resources import pod_requests
from extender.scheduling.decisions import Verdict
from extender.scheduling.lagging import RETRY_S, RETRY_TEXT
from extender.server.app import METRICS
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod
from tests.scheduling.worlds import ClockedWorld


class World(ClockedWorld):
    """n1 and n2 of 4 cpu, each full with a bound pod (o1, o2) as this cache sees them; `ask` and
    the gang `g` (two members of 4 cpu) wait."""

    def __init__(self) -> None:
        super().__init__(
            [
                make_node("n1", cpu="4"),
                make_node("n2", cpu="4"),
                make_node("n3", cpu="4", gpu="1"),
                make_pod("o1", cpu="4", node="n1", uid="uid-o1"),
                make_pod("o2", cpu="4", node="n2", uid="uid-o2"),
                make_pod("o3", cpu="1", gpu="1", node="n3", uid="uid-o3"),
                make_pod("ask", cpu="4", uid="uid-ask"),
                make_pod("gpu", cpu="1", gpu="1", uid="uid-gpu"),
                make_kai_podgroup("g", min_member=2),
                gang_pod("g-0", "g", cpu="4", uid="uid-g-0"),
                gang_pod("g-1", "g", cpu="4", uid="uid-g-1"),
            ]
        )

    def filter(self, name: str, nodes: list[str]) -> tuple[str, str]:
        """RETRY (a refusal answered as a retry, naming the node), REFUSED, or PASS; and the reason."""
        d = self.scheduler.filter(self.cluster.get("", "Pod", "default", name), nodes)
        if d.verdict is Verdict.PASS:
            return PASS, ""
        assert d.verdict is Verdict.NO_FIT or not d.lagging_on, d
        return (f"{RETRY} on {d.lagging_on}" if d.lagging_on else REFUSED), d.reason

    def reserve(self, node: str) -> None:
        """Capacity this cache keeps for a planned pod kube-scheduler knows nothing of."""
        self.store.hold(pod_key("default", "planned"), node, pod_requests(make_pod("planned", cpu="4")))

    def cordon(self, node: str) -> None:
        n = self.cluster.get("", "Node", "", node)
        n.setdefault("spec", {})["unschedulable"] = True
        self.cluster.apply(n)

    def wait(self, s: float) -> None:
        self.clock_s += s


Step = Callable[[World], None]
RETRY, REFUSED, PASS = "retry", "refused", "pass"
BEHIND = f"{RETRY} on n1"


def ask(w: World, nodes: list[str]) -> str:
    return w.filter("ask", nodes)[0]


# (case, steps before the look, pod asking, nodes offered, outcome)
CASES: list[tuple[str, list[Step], str, list[str], str]] = [
    ("a full node offered: this cache may be behind, a retry", [], "ask", ["n1"], BEHIND),
    ("a gang's members offered full nodes: a retry", [], "g-0", ["n1", "n2"], BEHIND),
    (
        "retried for longer than RETRY_S: the caches disagree for another reason, the refusal stands",
        [lambda w: ask(w, ["n1"]), lambda w: w.wait(RETRY_S + 1)],
        "ask",
        ["n1"],
        REFUSED,
    ),
    (
        "within RETRY_S of the first retry: still a retry",
        [lambda w: ask(w, ["n1"]), lambda w: w.wait(RETRY_S - 1)],
        "ask",
        ["n1"],
        BEHIND,
    ),
    (
        "a run ended by an answer the caches agreed on: the next disagreement starts a new one",
        [
            lambda w: ask(w, ["n1"]),
            lambda w: w.wait(RETRY_S + 1),
            lambda w: ask(w, ["n1"]),  # given up: the refusal stood
            lambda w: w.reserve("n2"),
            lambda w: ask(w, ["n2"]),  # refused for a reason this cache knows: the caches agree
        ],
        "ask",
        ["n1"],
        BEHIND,
    ),
    (
        "a node whose room this cache keeps for a planned pod: the refusal stands",
        [lambda w: w.cluster.delete("", "Pod", "default", "o1"), lambda w: w.reserve("n1")],
        "ask",
        ["n1"],
        REFUSED,
    ),
    (
        "short only of an extended resource (kube-scheduler may leave it to us)",
        [],
        "gpu",
        ["n3"],
        REFUSED,
    ),
    ("a node cordoned here: the refusal stands", [lambda w: w.cordon("n1")], "ask", ["n1"], REFUSED),
    (
        "the caches agree again (the pod's end seen here too): it passes",
        [lambda w: ask(w, ["n1"]), lambda w: w.cluster.delete("", "Pod", "default", "o1")],
        "ask",
        ["n1"],
        PASS,
    ),
]


@pytest.mark.parametrize(("case", "steps", "name", "offered", "outcome"), CASES, ids=[c[0] for c in CASES])
def test_a_refusal_where_kube_scheduler_saw_room_is_a_retry(
    case: str, steps: list[Step], name: str, offered: list[str], outcome: str
) -> None:
    w = World()
    for step in steps:
        step(w)
    got, reason = w.filter(name, offered)
    assert got == outcome, reason


def test_the_gang_binds_once_the_cache_sees_what_kube_scheduler_saw() -> None:
    w = World()
    assert w.filter("g-0", ["n1", "n2"])[0] == BEHIND
    w.cluster.delete("", "Pod", "default", "o1")
    w.cluster.delete("", "Pod", "default", "o2")
    w.wait(1)
    got, reason = w.filter("g-0", ["n1", "n2"])
    assert got == PASS, reason
    assert w.filter("g-1", ["n1", "n2"])[0] == PASS


async def test_the_wire_answer_is_an_error_naming_no_node(make_service: Any) -> None:
    """kube-scheduler retries an extender's error after the pod's backoff; a refusal in FailedNodes
    would park the pod behind its own plugins' queueing hints."""
    svc = await make_service(
        [make_node("n1", cpu="4"), make_pod("o1", cpu="4", node="n1"), make_pod("ask", cpu="4")]
    )
    retries = svc.app[METRICS].lag_retries
    before = retries._value.get()
    doc = await svc.filter("ask", ["n1"])
    assert RETRY_TEXT in doc["Error"] and doc["NodeNames"] == [] and not doc["FailedNodes"], doc
    assert retries._value.get() == before + 1  # gang_extender_filter_lag_retries_total
