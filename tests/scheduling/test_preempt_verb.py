"""The preempt verb's choice among kube-scheduler's candidates: candidates x victims x gangs -> which
survive and why (the order is extender/scheduling/preemption.py's docstring)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.gang.entry import PlannedPod
from extender.model.keys import pod_key
from extender.model.labels import SUBGROUP_NAME
from extender.scheduling import preemption
from extender.scheduling.ledger import GangLedger
from extender.scheduling.preemption import Outcome
from extender.sim.expand import expand
from extender.state.store import ClusterStore
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod

KEPT = Outcome.KEPT
BREAKS = Outcome.VETOED_BREAKS_GANG
RESERVED = Outcome.VETOED_RESERVATION
NO_VICTIM = Outcome.DROPPED_NO_VICTIM

DISRUPT_ALL_JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: default}
spec:
  scheduling:
    schedulingPolicy: {gang: {}}
    disruptionMode: {all: {}}
  replicatedJobs:
  - name: workers
    replicas: 1
    template:
      spec:
        parallelism: 2
        completions: 2
        template:
          spec:
            containers: [{name: w, image: sleep, resources: {requests: {cpu: "2", memory: 1Gi}}}]
"""

# a scheduling.k8s.io PodGroup that is disrupted whole, running above its quorum (3 of minCount 2)
PODGROUP_ALL = {
    "apiVersion": "scheduling.k8s.io/v1alpha2",
    "kind": "PodGroup",
    "metadata": {"name": "pg-all", "namespace": "default"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": "PodGroup"},
}


def prioritized(pod: dict[str, Any], priority: int) -> dict[str, Any]:
    pod["spec"]["priority"] = priority
    pod["metadata"]["uid"] = pod["metadata"]["name"]
    return pod


def gang(name: str, min_member: int, nodes: list[str | None], *, priority: int, cpu: str = "2") -> list[dict]:
    """A running KAI gang: one member bound on each of `nodes` (member i on nodes[i])."""
    pods = [
        prioritized(gang_pod(f"{name}-{i}", name, cpu=cpu, node=node), priority)
        for i, node in enumerate(nodes)
    ]
    return [make_kai_podgroup(name, min_member=min_member), *pods]


def plain(name: str, node: str | None, *, priority: int = 0, cpu: str = "2") -> dict[str, Any]:
    return prioritized(make_pod(name, cpu=cpu, node=node), priority)


def jobset_members(node: str) -> list[dict[str, Any]]:
    objs = expand([yaml.safe_load(DISRUPT_ALL_JOBSET)]).objects
    for i, o in enumerate(
        sorted((o for o in objs if o["kind"] == "Pod"), key=lambda o: o["metadata"]["name"])
    ):
        o["spec"]["nodeName"] = node
        o["metadata"]["name"] = f"js-{i}"  # short names for the table; the owner chain is what groups them
        prioritized(o, 10)
    return objs


def subgroup_gang() -> list[dict[str, Any]]:
    """KAI subgroups a and b of minMember 2 each, and the root needs one of them (minSubGroup 1):
    s1 runs a-0 and b-0, s2 runs a-1, b-1 and b-2."""
    group = make_kai_podgroup("sub", subgroups=[{"name": "a", "minMember": 2}, {"name": "b", "minMember": 2}])
    group["spec"]["minSubGroup"] = 1
    placed = {"a-0": "s1", "b-0": "s1", "a-1": "s2", "b-1": "s2", "b-2": "s2"}
    pods = [
        prioritized(gang_pod(f"sub-{m}", "sub", cpu="1", node=node, labels={SUBGROUP_NAME: m[0]}), 10)
        for m, node in placed.items()
    ]
    return [group, *pods]


def world() -> list[dict[str, Any]]:
    """Nodes of 8 cpu; who runs where is in each comment."""
    nodes = "a1 a2 b c j k e l l2 h m m2 r s1 s2".split()
    return [
        *(make_node(n, cpu="8") for n in nodes),
        *gang("run4", 4, ["a1", "a1", "a2", "a2"], priority=10),  # a running 4-pod gang, minMember 4
        plain("plain-b0", "b"),
        plain("plain-b1", "b"),
        plain("plain-c0", "c", priority=5),
        *jobset_members("j"),  # a JobSet gang of 2 with disruptionMode all
        PODGROUP_ALL,
        *(
            prioritized(make_pod(f"pg-{i}", cpu="2", node="k", scheduling_group="pg-all"), 0)
            for i in range(3)
        ),
        *gang("elastic", 2, ["e", "e", "e", "e"], priority=10, cpu="1"),  # 4 running, quorum 2
        *gang("lo", 2, ["l", "l2"], priority=100),
        plain("plain-l0", "l"),
        plain("plain-l2", "l2", priority=5),
        *gang("hi", 2, ["h", "h"], priority=500),
        *gang("lo2", 2, ["m", "m2"], priority=100),
        *gang("lo3", 2, ["m", "m2"], priority=100),
        *subgroup_gang(),  # subgroups a (2 of minMember 2) and b (3 of 2), one of them needed
        # r: a plain pod of 4 cpu, and 4 cpu held by gang "held"'s plan (see held_world)
        plain("plain-r0", "r", cpu="4"),
        *gang("held", 2, [None, None], priority=50),
        plain("big", None, priority=1000, cpu="6"),  # preemptors
        plain("small", None, priority=1000, cpu="1"),
    ]


class World:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.store = ClusterStore()
        self.ledger = GangLedger(
            self.store, wait_s=5.0, backoff_initial_s=1.0, backoff_max_s=10.0, clock=lambda: 1000.0
        )
        for o in objects:
            self.store.upsert(copy.deepcopy(o))
        self._plan_held()

    def _plan_held(self) -> None:
        """Gang "held" is planned onto node r: its two pending members hold 4 cpu there."""
        recs = [self.store.pods[pod_key("default", f"held-{i}")] for i in range(2)]
        spec = self.store.membership(recs[0]).group
        assignment = {r.key: (PlannedPod("r", r.uid, None), r.requests) for r in recs}
        self.ledger.plan(spec, assignment, domain="")

    def uid(self, name: str) -> str:
        return self.store.pods[pod_key("default", name)].uid

    def choose(self, preemptor: str, candidates: dict[str, list[str]]) -> preemption.PreemptDecision:
        rec = self.store.pods[pod_key("default", preemptor)]
        victims = {
            node: {"Pods": [{"UID": self.uid(v)} for v in names], "NumPDBViolations": 0}
            for node, names in candidates.items()
        }
        return preemption.choose(self.store, self.ledger, rec.obj, rec.requests, victims)


@pytest.fixture(scope="module")
def the_world() -> World:
    return World(world())


CASES = [
    pytest.param(
        "small",
        {"a1": ["run4-0"], "b": ["plain-b0"]},
        {"a1": BREAKS, "b": KEPT},
        id="a running 4-pod gang (minMember 4) is vetoed when a plain-pod candidate exists",
    ),
    pytest.param(
        "small",
        {"a1": ["run4-0", "run4-1"], "a2": ["run4-2"]},
        {"a1": BREAKS, "a2": KEPT},
        id="both break the same gang: fewer victims wins",
    ),
    pytest.param(
        "small",
        {"j": ["js-0"], "c": ["plain-c0"]},
        {"j": BREAKS, "c": KEPT},
        id="a disruption-all JobSet member is vetoed",
    ),
    pytest.param(
        "small",
        {"k": ["pg-0"], "c": ["plain-c0"]},
        {"k": BREAKS, "c": KEPT},
        id="a disruption-all PodGroup above its quorum: any victim breaks it",
    ),
    pytest.param(
        "small",
        {"e": ["elastic-0", "elastic-1"], "b": ["plain-b0"]},
        {"e": KEPT, "b": KEPT},
        id="an elastic gang above its quorum (4 of 2) loses 2 without breaking",
    ),
    pytest.param(
        "small",
        {"e": ["elastic-0", "elastic-1", "elastic-2"], "b": ["plain-b0"]},
        {"e": BREAKS, "b": KEPT},
        id="the same gang taken to 1 of 2 breaks",
    ),
    pytest.param(
        "small",
        {"s1": ["sub-a-0", "sub-b-0"], "c": ["plain-c0"]},
        {"s1": BREAKS, "c": KEPT},
        id="subgroups: b still holds the root's minSubGroup 1, but a would run 1 of its minMember 2",
    ),
    pytest.param(
        "small",
        {"s1": ["sub-b-0"], "c": ["plain-c0"]},
        {"s1": KEPT, "c": KEPT},
        id="subgroups: b above its minMember (3 of 2) loses one without breaking",
    ),
    pytest.param(
        "small",
        {"s2": ["sub-a-1", "sub-b-1", "sub-b-2"], "c": ["plain-c0"]},
        {"s2": BREAKS, "c": KEPT},
        id="subgroups: both below their minMember takes the root below its minSubGroup",
    ),
    pytest.param(
        "small",
        {"l": ["lo-0"], "h": ["hi-0"]},
        {"l": KEPT, "h": BREAKS},
        id="all break gangs: the one breaking the lowest-priority gang wins",
    ),
    pytest.param(
        "small",
        {"m": ["lo2-0", "lo3-0"], "h": ["hi-0"]},
        {"m": BREAKS, "h": KEPT},
        id="all break gangs: fewest gangs first, before their priority",
    ),
    pytest.param(
        "small",
        {"l": ["lo-0", "plain-l0"], "l2": ["lo-1", "plain-l2"]},
        {"l": KEPT, "l2": BREAKS},
        id="same gang, same count: the lower summed victim priority wins",
    ),
    pytest.param(
        "small",
        {"l": ["lo-0"], "l2": ["lo-1"]},
        {"l": KEPT, "l2": KEPT},
        id="equal on every count: both kept",
    ),
    pytest.param(
        "big",
        {"r": ["plain-r0"], "b": ["plain-b0", "plain-b1"]},
        {"r": RESERVED, "b": KEPT},
        id="a node whose freed room another gang's plan holds is dropped",
    ),
    pytest.param(
        "big",
        {"r": ["plain-r0"]},
        {"r": RESERVED},
        id="dropped even when it is the only candidate",
    ),
    pytest.param(
        "small",
        {"r": ["plain-r0"], "b": ["plain-b0"]},
        {"r": KEPT, "b": KEPT},
        id="a hold that leaves the preemptor room is no reason to drop",
    ),
    pytest.param(
        "held-0",
        {"r": ["plain-r0"]},
        {"r": KEPT},
        id="the preemptor's own gang's plan is its own room",
    ),
    pytest.param(
        "small",
        {"b": [], "c": ["plain-c0"]},
        {"b": NO_VICTIM, "c": KEPT},
        id="a candidate without a victim is dropped",
    ),
    pytest.param(
        "small",
        {"b": [], "a1": ["run4-0"]},
        {"b": NO_VICTIM, "a1": KEPT},
        id="a victimless candidate is no alternative to a breaking one",
    ),
]


@pytest.mark.parametrize(("preemptor", "candidates", "expected"), CASES)
def test_which_candidates_survive(the_world, preemptor, candidates, expected):
    decision = the_world.choose(preemptor, candidates)
    assert {n: c.outcome for n, c in decision.candidates.items()} == expected
    assert set(decision.victims) == {n for n, o in expected.items() if o is KEPT}
    for node, meta in decision.victims.items():
        assert [p["UID"] for p in meta["Pods"]] == [the_world.uid(v) for v in candidates[node]]


def test_each_veto_says_why(the_world):
    decision = the_world.choose("small", {"a1": ["run4-0"], "j": ["js-1"], "b": ["plain-b0"]})
    assert decision.candidates["a1"].why.startswith(
        "gang default/run4 would fall below its quorum (3 of 4 members left)"
    )
    assert "disrupted only whole (disruption mode all)" in decision.candidates["j"].why
    assert "while another candidate breaks none" in decision.candidates["j"].why
    assert decision.counts() == {KEPT: 1, BREAKS: 2}
    held = the_world.choose("big", {"r": ["plain-r0"]}).candidates["r"]
    assert held.why == (
        "the room its victims would free is held for gang default/held; the preemptor would still not fit"
    )


def test_a_bind_in_flight_holds_room_too_and_is_named():
    w = World(world())
    rec = w.store.pods[pod_key("default", "small")]
    w.ledger.hold(rec.key, "b", {"cpu": 4000})  # a plain pod's own bind, in flight on b
    decision = w.choose("big", {"b": ["plain-b0"], "c": ["plain-c0"]})
    assert decision.candidates["b"].outcome is RESERVED
    assert decision.candidates["b"].why.startswith(
        "the room its victims would free is held for pod default/small"
    )
    assert decision.candidates["c"].outcome is KEPT


def test_a_victim_named_twice_counts_once(the_world):
    decision = the_world.choose("small", {"e": ["elastic-0", "elastic-0", "elastic-1"], "b": ["plain-b0"]})
    assert decision.candidates["e"].outcome is KEPT  # 2 of the 4 go, quorum 2 holds


def test_an_unknown_victim_is_a_plain_pod_that_frees_nothing(the_world):
    store, ledger = the_world.store, the_world.ledger
    rec = store.pods[pod_key("default", "small")]
    victims = {"b": {"Pods": [{"UID": "never-seen"}], "NumPDBViolations": 0}}
    decision = preemption.choose(store, ledger, rec.obj, rec.requests, victims)
    assert decision.candidates["b"].outcome is KEPT and decision.victims == victims


def test_a_gang_half_way_through_its_release_counts_its_planned_members():
    """Quorum 2: one member bound, the other planned (on its way to bind). Evicting the bound one
    breaks the gang about to be whole."""
    objs = [make_node("x", cpu="8"), make_node("y", cpu="8"), *gang("g", 2, ["x", None], priority=0)]
    objs.append(plain("p", "y"))
    objs.append(plain("pre", None, priority=10, cpu="1"))
    w = World.__new__(World)
    w.store = ClusterStore()
    w.ledger = GangLedger(w.store, wait_s=5.0, backoff_initial_s=1.0, backoff_max_s=10.0, clock=lambda: 0.0)
    for o in objs:
        w.store.upsert(o)
    rec = w.store.pods[pod_key("default", "g-1")]
    w.ledger.plan(
        w.store.membership(rec).group, {rec.key: (PlannedPod("y", rec.uid, None), rec.requests)}, domain=""
    )
    decision = w.choose("pre", {"x": ["g-0"], "y": ["p"]})
    assert {n: c.outcome for n, c in decision.candidates.items()} == {"x": BREAKS, "y": KEPT}


# ------------------------------------------------------------------ a property over random candidates
def _oracle_breaks(w: World, names: list[str]) -> bool:
    """Whether these victims break a gang, by the rules written out for the world's gangs."""
    quorum = {"run4": (4, 4), "elastic": (2, 4), "lo": (2, 2), "hi": (2, 2), "lo2": (2, 2), "lo3": (2, 2)}
    taken: dict[str, int] = {}
    for n in names:
        if n.startswith(("js-", "pg-")):
            return True  # disruption all
        group = n.rpartition("-")[0]
        if group in quorum:
            taken[group] = taken.get(group, 0) + 1
    return any(quorum[g][1] - k < quorum[g][0] for g, k in taken.items())


BOUND_ON: dict[str, list[str]] = {}
for _o in world():
    if _o["kind"] == "Pod" and _o["spec"].get("nodeName") not in (None, "r", "s1", "s2"):
        BOUND_ON.setdefault(_o["spec"]["nodeName"], []).append(_o["metadata"]["name"])

candidates_strategy = st.dictionaries(
    st.sampled_from(sorted(BOUND_ON)),
    st.integers(min_value=0, max_value=2**16),
    max_size=len(BOUND_ON),
).map(
    lambda picks: {
        node: [v for i, v in enumerate(BOUND_ON[node]) if mask >> i & 1] for node, mask in picks.items()
    }
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(candidates=candidates_strategy)
def test_the_answer_is_a_subset_never_empty_and_never_breaks_needlessly(the_world, candidates):
    decision = the_world.choose("small", candidates)
    answer = decision.victims
    assert set(answer) <= set(candidates)
    for node, meta in answer.items():
        assert meta["Pods"], f"{node} answered without a victim"
        assert [p["UID"] for p in meta["Pods"]] == [the_world.uid(v) for v in candidates[node]]
    with_victims = {n: v for n, v in candidates.items() if v}
    gentle = {n for n, v in with_victims.items() if not _oracle_breaks(the_world, v)}
    if with_victims:
        assert answer, "every candidate with victims was vetoed"
    if gentle:
        assert set(answer) == gentle, "a breaking candidate kept, or a gentle one vetoed"


# ------------------------------------------------------------------ through the service
async def test_the_verb_answers_the_kept_candidates_and_counts_outcomes(make_service):
    objs = [o for o in world() if o["kind"] != "Pod" or o["metadata"]["name"] not in ("held-0", "held-1")]
    svc = await make_service(objs)
    uid = {n: svc.pod(n)["metadata"]["uid"] for n in ("run4-0", "plain-b0", "plain-c0")}
    doc = {
        "Pod": svc.pod("small"),
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "a1": {"Pods": [{"UID": uid["run4-0"]}], "NumPDBViolations": 0},
            "b": {"Pods": [{"UID": uid["plain-b0"]}], "NumPDBViolations": 1},
            "c": {"Pods": [], "NumPDBViolations": 0},
        },
    }
    resp = await svc.client.post("/preempt", data=orjson.dumps(doc))
    assert resp.status == 200
    assert orjson.loads(await resp.read()) == {
        "NodeNameToMetaVictims": {"b": {"Pods": [{"UID": uid["plain-b0"]}], "NumPDBViolations": 1}}
    }
    # the full-pod mode answers in the same shape
    full = {
        "Pod": svc.pod("small"),
        "NodeNameToVictims": {
            "a1": {"Pods": [svc.pod("run4-0")], "NumPDBViolations": 0},
            "c": {"Pods": [svc.pod("plain-c0")], "NumPDBViolations": 0},
        },
        "NodeNameToMetaVictims": None,
    }
    resp = await svc.client.post("/preempt", data=orjson.dumps(full))
    assert orjson.loads(await resp.read()) == {
        "NodeNameToMetaVictims": {"c": {"Pods": [{"UID": uid["plain-c0"]}], "NumPDBViolations": 0}}
    }
    text = await (await svc.client.get("/metrics")).text()
    assert 'gang_extender_preempt_candidates_total{outcome="kept"} 2.0' in text
    assert 'gang_extender_preempt_candidates_total{outcome="vetoed-breaks-gang"} 2.0' in text
    assert 'gang_extender_preempt_candidates_total{outcome="dropped-no-victim"} 1.0' in text


async def test_unknown_nodes_are_still_a_400(make_service):
    svc = await make_service([make_node("a"), plain("v", "a"), plain("p", None)])
    doc = {
        "Pod": svc.pod("p"),
        "NodeNameToMetaVictims": {
            "a": {"Pods": [{"UID": svc.pod("v")["metadata"]["uid"]}]},
            "ghost": {"Pods": [{"UID": "x"}]},
        },
    }
    resp = await svc.client.post("/preempt", data=orjson.dumps(doc))
    assert resp.status == 400
    assert "unknown to the extender's cluster cache: 'ghost'" in await resp.text()
