"""A waiting gang's reason reaches its pending members and its group object when its situation changes,
and only then.

The scheduler is driven directly, as the server drives it, over an embedded cluster; a small
emulation of kube-scheduler and the API server applies what each call returns: the filtered pod's
condition is written with the filter's reason (kube-scheduler does that), a bind call waits at the
barrier until a release, an expiry or a dropped plan answers it (its error is then written on the
pod), and the "condition" and "group-status" Effects land on the objects.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.scheduling.decisions import BindVerdict, Effect, Verdict
from extender.scheduling.ledger import GangLedger
from extender.scheduling.reasons import QUORUM_COUNT_REFRESH_S
from extender.scheduling.scheduler import Scheduler
from extender.scheduling.telling import gang_message
from extender.sim.cluster import topology
from extender.state.embedded import EmbeddedCluster
from extender.state.store import ClusterStore
from tests.builders import gang_pod, make_kai_podgroup, make_pod, rack_cluster

RACK = {"topology": "dc", "requiredTopologyLevel": "rack"}
RACK_LABEL = "topology.kubernetes.io/rack"
PICKY = "picky.example.com/admits"
GANG = "default/train"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass
class World:
    """The scheduler, its cluster, and what the API shows on each pod's PodScheduled condition."""

    cluster: EmbeddedCluster
    store: ClusterStore
    scheduler: Scheduler
    clock: Clock
    conditions: dict[str, str] = dataclasses.field(default_factory=dict)
    group_status: list[dict] = dataclasses.field(default_factory=list)
    waiting_calls: set[str] = dataclasses.field(default_factory=set)
    writes: int = 0

    def pod(self, name: str) -> dict | None:
        return self.cluster.get("", "Pod", "default", name)

    def apply(self, effects: list[Effect]) -> None:
        for e in effects:
            if e.kind == "condition":
                pod = self.pod(e.name)
                if pod is not None and not (pod.get("spec") or {}).get("nodeName"):
                    self.conditions[f"{e.namespace}/{e.name}"] = e.data["message"]
                self.writes += 1
            elif e.kind == "group-status":
                self.group_status.append(e.data["status"])
                self.writes += 1

    def answer(self, pk: str, error: str) -> None:
        """A waiting bind call answered: kube-scheduler writes the error on the pod."""
        self.waiting_calls.discard(pk)
        if error:
            self.scheduler.note_bind_error(pk, error)
            self.conditions[pk] = error

    def filter(self, name: str) -> Verdict:
        pod = self.pod(name)
        decision = self.scheduler.filter(pod, sorted(self.store.node_rows))
        pk = f"default/{name}"
        if decision.verdict is not Verdict.PASS:
            self.conditions[pk] = decision.reason
        self.apply(decision.effects)
        if decision.verdict is Verdict.PASS:
            self.bind(name, decision.passed[0])  # kube-scheduler binds a pod that passed
        self.answer_dropped()
        return decision.verdict

    def bind(self, name: str, node: str) -> None:
        pod = self.pod(name)
        pk = f"default/{name}"
        d = self.scheduler.bind(namespace="default", name=name, uid=pod["metadata"]["uid"], node=node)
        if d.verdict is BindVerdict.REFUSE:
            self.answer(pk, d.message)
        elif d.verdict is BindVerdict.WAIT:
            self.waiting_calls.add(pk)
        elif d.verdict is BindVerdict.RELEASE:
            results = {}
            for m in d.members:
                member = self.pod(m.pod.split("/")[1])
                self.cluster.apply({**member, "spec": {**member["spec"], "nodeName": m.node}})
                results[m.pod] = ""
            self.apply(self.scheduler.release_done(d.gang, results))
            for m in d.members:
                self.answer(m.pod, "")
        self.answer_dropped()

    def answer_dropped(self) -> None:
        for answer in self.scheduler.ledger.take_answers():
            for pk in answer.pods:
                if pk in self.waiting_calls:
                    self.answer(pk, answer.message)

    def tick(self, seconds: float) -> None:
        """The server's ticker after the clock moved."""
        self.clock.now += seconds
        for expiry, effects in self.scheduler.binding.expire():
            for pk in expiry.waiting:
                if pk in self.waiting_calls:
                    self.answer(pk, expiry.message)
            self.apply(effects)
        self.settle()

    def settle(self) -> None:
        """What the ticker does without the clock moving (within 0.1 s of any change)."""
        self.apply(self.scheduler.telling.backoffs_over())
        self.apply(self.scheduler.telling.quorum_arrived())
        self.apply(self.scheduler.telling.fresh_reasons())
        self.answer_dropped()

    def gang_reason(self) -> str:
        entry = self.scheduler.ledger.entry(GANG)
        return gang_message(GANG, entry.last_reason) if entry else ""


def world(objects: list[dict]) -> World:
    store = ClusterStore()
    cluster = EmbeddedCluster(objects)
    cluster.attach(store)
    clock = Clock()
    ledger = GangLedger(
        store,
        wait_s=5,
        hold_s=5,
        backoff_initial_s=2,
        backoff_max_s=60,
        clock=clock,
        release_on_first_bind=False,
    )
    return World(cluster, store, Scheduler(store, ledger), clock)


def conditions_of(effects: list[Effect]) -> dict[str, str]:
    return {f"{e.namespace}/{e.name}": e.data["message"] for e in effects if e.kind == "condition"}


def test_a_rack_gang_that_does_not_fit_tells_every_waiting_sibling_once_its_quorum_exists():
    """Seen on kube-scheduler 1.20: after all 12 pods existed and the gang was known not to fit, the
    first pods still said "4 exist, 12 needed" until kube-scheduler retried them."""
    # two racks of 4 nodes x 8 cpu: 12 pods x 4 cpu need 48 cpu in one rack, a rack has 32
    w = world([*rack_cluster(racks=2, nodes_per_rack=4), topology("dc")])
    w.cluster.apply(make_kai_podgroup("train", min_member=12, topology=RACK))
    for i in range(11):
        w.cluster.apply(gang_pod(f"train-{i}", "train", cpu="4"))
        assert w.filter(f"train-{i}") is Verdict.WAITING
    # a count that follows a count waits (n pods arriving would cost n*n/2 writes otherwise)...
    assert (
        w.conditions["default/train-0"]
        == "gang default/train waiting for pods: 1 exist, 12 needed for quorum"
    )
    assert w.writes == 1  # the group's status, once: no sibling rewritten per arriving pod
    w.tick(QUORUM_COUNT_REFRESH_S)
    assert w.writes == 1 + 10 + 1
    # ...then every pod that was turned away says how many exist now, not when it was filtered
    expected = "gang default/train waiting for pods: 11 exist, 12 needed for quorum"
    assert {pk: w.conditions[pk] for pk in w.conditions} == {
        f"default/train-{i}": expected for i in range(11)
    }
    w.cluster.apply(gang_pod("train-11", "train", cpu="4"))
    decision = w.scheduler.filter(w.pod("train-11"), sorted(w.store.node_rows))
    assert decision.verdict is Verdict.NO_FIT
    assert "rack" in decision.reason
    # the siblings are ours to tell; kube-scheduler writes the reason on the pod it filtered
    assert conditions_of(decision.effects) == {f"default/train-{i}": decision.reason for i in range(11)}
    (cond,) = {
        (e.data["type"], e.data["status"], e.data["reason"])
        for e in decision.effects
        if e.kind == "condition"
    }
    assert cond == ("PodScheduled", "False", "Unschedulable")
    (status,) = [e.data["status"] for e in decision.effects if e.kind == "group-status"]
    assert status["phase"] == "Pending"
    assert [c["message"] for c in status["schedulingConditions"]] == [decision.reason]
    # a steady state writes nothing: the same filter again, or a sibling's turn, or the ticker
    for name in ("train-11", "train-3"):
        again = w.scheduler.filter(w.pod(name), sorted(w.store.node_rows))
        assert again.reason == decision.reason
        assert [e for e in again.effects if e.kind in ("condition", "group-status")] == []
    assert w.scheduler.telling.fresh_reasons() == []


def test_a_pod_deleted_or_bound_is_forgotten_and_a_pod_of_its_own_never_kept():
    w = world([*rack_cluster(), make_kai_podgroup("train", min_member=3)])
    for i in range(2):
        w.cluster.apply(gang_pod(f"train-{i}", "train"))
        w.filter(f"train-{i}")
    assert set(w.scheduler.told.pods) == {"default/train-0", "default/train-1"}
    w.cluster.delete("", "Pod", "default", "train-0")
    pod = w.pod("train-1")
    w.cluster.apply({**pod, "spec": {**pod["spec"], "nodeName": "n000"}})
    assert w.scheduler.told.pods == {}
    # a pod of its own has no siblings to tell: nothing is kept for it
    w.cluster.apply(make_pod("alone", cpu="64"))
    assert w.filter("alone") is Verdict.NO_FIT
    assert w.scheduler.told.pods == {}


def test_a_plan_dropped_by_the_watch_is_told_by_the_ticker():
    w = world([*rack_cluster(), make_kai_podgroup("train", min_member=2)])
    w.cluster.apply(gang_pod("train-0", "train"))
    w.filter("train-0")  # waiting for pods: told
    w.cluster.apply(gang_pod("train-1", "train"))
    assert w.filter("train-1") is Verdict.PASS  # planned; train-1 waits at bind
    assert w.conditions["default/train-0"] == "gang default/train: planned 2 pods"
    planned = w.scheduler.ledger.entry(GANG).plan["default/train-0"].node
    assert planned == "n000"
    node = w.store.node(planned)
    w.cluster.apply({**node, "spec": {"unschedulable": True}})  # cordoned: the plan is dropped
    w.settle()
    assert w.gang_reason() == "gang default/train: planned node n000 was removed or cordoned; replanning"
    assert w.conditions["default/train-0"] == w.gang_reason()
    assert w.conditions["default/train-1"] == w.gang_reason()  # its bind call was answered


@pytest.mark.parametrize(
    ("edit", "dropped"),
    [
        pytest.param(
            lambda node: {**node["metadata"]["labels"], RACK_LABEL: "r01"}, True, id="moved to rack r01"
        ),
        pytest.param(
            lambda node: {k: v for k, v in node["metadata"]["labels"].items() if k != RACK_LABEL},
            True,
            id="its rack label removed",
        ),
        pytest.param(
            lambda node: {**node["metadata"]["labels"], "team": "a"}, False, id="another label added"
        ),
        pytest.param(lambda node: node["metadata"]["labels"], False, id="the same labels written again"),
    ],
)
def test_a_plan_is_dropped_when_a_planned_node_moves_out_of_its_domain(edit, dropped):
    """A rack gang planned on two nodes of rack r00 (one member each): a node's rack label rewritten
    since would have its release bind the gang across two racks. The plan is dropped and replanned in
    one rack; a label that leaves every node in its domain keeps it."""
    w = world([*rack_cluster(), topology("dc"), make_kai_podgroup("train", min_member=2, topology=RACK)])
    for i in range(2):
        w.cluster.apply(gang_pod(f"train-{i}", "train", cpu="5"))
    assert w.filter("train-0") is Verdict.PASS
    plan = dict(w.scheduler.ledger.entry(GANG).plan)
    nodes = sorted(p.node for p in plan.values())
    assert len(nodes) == 2 and nodes[0] != nodes[1] and {n[:3] for n in nodes} == {"n00"}, nodes
    node = w.store.node(nodes[-1])
    w.cluster.apply({**node, "metadata": {**node["metadata"], "labels": edit(node)}})
    w.settle()
    entry = w.scheduler.ledger.entry(GANG)
    if not dropped:
        assert entry.plan == plan
        return
    assert not entry.plan
    assert w.gang_reason() == (
        f"gang default/train: planned node {nodes[-1]} moved to another topology domain since the plan; "
        "replanning"
    )
    assert w.filter("train-0") is Verdict.PASS
    racks = {w.store.node(p.node)["metadata"]["labels"].get(RACK_LABEL) for p in entry.plan.values()}
    assert len(entry.plan) == 2 and len(racks) == 1 and None not in racks, entry.plan


def _relabel(w: World, name: str, **labels: str | None) -> None:
    node = w.store.node(name)
    now = {**node["metadata"]["labels"], **labels}
    w.cluster.apply({**node, "metadata": {**node["metadata"], "labels": {k: v for k, v in now.items() if v}}})
    w.settle()


def _half_released(w: World, *, watch_shows_it: bool) -> tuple[str, str]:
    """A rack gang of two planned on two nodes of rack r00; its release binds train-0 (the watch showing
    it, or not yet) and the API refuses train-1, which stays planned. Their nodes."""
    w.cluster.apply(topology("dc"))
    for i in range(2):
        w.cluster.apply(gang_pod(f"train-{i}", "train", cpu="5"))
    assert w.filter("train-0") is Verdict.PASS
    plan = w.scheduler.ledger.entry(GANG).plan
    a, b = plan["default/train-0"].node, plan["default/train-1"].node
    for name, node in (("train-0", a), ("train-1", b)):
        bind = w.scheduler.bind(namespace="default", name=name, uid=w.pod(name)["metadata"]["uid"], node=node)
        if bind.verdict is BindVerdict.RELEASE:
            break
    assert bind.verdict is BindVerdict.RELEASE
    if watch_shows_it:
        pod = w.pod("train-0")
        w.cluster.apply({**pod, "spec": {**pod["spec"], "nodeName": a}})
    w.scheduler.release_done(bind.gang, {"default/train-0": "", "default/train-1": "conflict: try again"})
    assert list(w.scheduler.ledger.entry(GANG).plan) == ["default/train-1"]
    return a, b


@pytest.mark.parametrize("watch_shows_it", [True, False], ids=["bound", "bound by the API, unseen"])
@pytest.mark.parametrize("moved", ["the bound member's", "the planned member's"])
def test_a_plan_is_dropped_when_a_bound_members_domain_and_its_own_part(watch_shows_it, moved):
    """Half of a rack gang bound, the rest planned beside it: a relabel that puts the bound member's
    node, or the planned member's, in another rack drops the plan, whether the cache shows the bound
    member or only the API confirmed it; the replan joins the bound member where it now is."""
    w = world([*rack_cluster(), make_kai_podgroup("train", min_member=2, topology=RACK)])
    a, b = _half_released(w, watch_shows_it=watch_shows_it)
    _relabel(w, a if moved == "the bound member's" else b, **{RACK_LABEL: "r01"})
    assert not w.scheduler.ledger.entry(GANG).plan, w.gang_reason()
    if not watch_shows_it:
        pod = w.pod("train-0")  # the watch catches up
        w.cluster.apply({**pod, "spec": {**pod["spec"], "nodeName": a}})
    decision = w.scheduler.filter(w.pod("train-1"), sorted(w.store.node_rows))
    assert decision.verdict is Verdict.PASS, decision.reason
    racks = {w.store.node(n)["metadata"]["labels"][RACK_LABEL] for n in (a, *decision.passed)}
    assert len(racks) == 1, (a, decision.passed, racks)


def test_a_cordoned_node_that_moves_still_pins_the_members_bound_on_it():
    """Cordoning unbinds nothing: the member bound on a cordoned node still pins its gang's rack, so
    when that node moves to another rack the rest of the plan is dropped as for any node."""
    w = world([*rack_cluster(), make_kai_podgroup("train", min_member=2, topology=RACK)])
    a, _ = _half_released(w, watch_shows_it=True)
    node = w.store.node(a)
    w.cluster.apply({**node, "spec": {**node.get("spec", {}), "unschedulable": True}})
    w.settle()
    assert list(w.scheduler.ledger.entry(GANG).plan) == ["default/train-1"]
    _relabel(w, a, **{RACK_LABEL: "r01"})
    assert not w.scheduler.ledger.entry(GANG).plan, w.gang_reason()


@pytest.mark.parametrize(
    ("edit", "dropped"),
    [
        pytest.param({"labels": {PICKY: None}}, True, id="the label its selector asks for removed"),
        pytest.param({"taints": [{"key": "t", "effect": "NoSchedule"}]}, True, id="tainted"),
        pytest.param({"labels": {"team": "a"}}, False, id="another label added"),
    ],
)
def test_a_plan_is_dropped_when_a_planned_node_no_longer_admits_its_member(edit, dropped):
    """train-0 selects nodes by a label and waits at bind on its planned node; that node loses the label
    (or takes a taint it does not tolerate) before the barrier completes. Released there, it would run
    where kube-scheduler would never bind it: the plan is dropped with the reason instead."""
    nodes = rack_cluster()
    for n in nodes:
        n["metadata"]["labels"][PICKY] = "yes"
    w = world([*nodes, make_kai_podgroup("train", min_member=2)])
    picky = gang_pod("train-0", "train", cpu="5")
    picky["spec"]["nodeSelector"] = {PICKY: "yes"}
    w.cluster.apply(picky)
    w.cluster.apply(gang_pod("train-1", "train", cpu="5"))
    assert w.filter("train-0") is Verdict.PASS
    at = w.scheduler.ledger.entry(GANG).plan["default/train-0"].node
    uid = w.pod("train-0")["metadata"]["uid"]
    assert w.scheduler.bind(namespace="default", name="train-0", uid=uid, node=at).verdict is BindVerdict.WAIT
    if "labels" in edit:
        _relabel(w, at, **edit["labels"])
    else:
        node = w.store.node(at)
        w.cluster.apply({**node, "spec": {**node.get("spec", {}), "taints": edit["taints"]}})
        w.settle()
    entry = w.scheduler.ledger.entry(GANG)
    if not dropped:
        assert "default/train-0" in entry.arrived and entry.plan["default/train-0"].node == at
        return
    assert not entry.plan
    assert w.gang_reason() == (
        f"gang default/train: planned node {at} no longer admits member default/train-0 (its labels or "
        "taints changed); replanning"
    )


# ---------------------------------------------------------------------------- any interleaving
N = 4
OPS = st.one_of(
    st.tuples(st.just("add"), st.integers(0, N - 1)),
    st.tuples(st.just("delete"), st.integers(0, N - 1)),
    st.tuples(st.just("filter"), st.integers(0, N - 1)),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 2.5, 6.0])),
    st.tuples(st.just("hog"), st.integers(0, 1)),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=40))
def test_every_pending_member_says_the_gangs_current_reason_after_any_interleaving(ops):
    """After any sequence of arrivals, deletions, filters (with their binds), clock moves and capacity
    taken and given back: every pending member that was told anything says the gang's current reason
    (or was told something newer by kube-scheduler since the reason last changed, or a count of pods
    told less than QUORUM_COUNT_REFRESH_S ago), the API shows what the scheduler believes it shows,
    and repeating a filter writes nothing."""
    # two racks of 2 nodes x 8 cpu; 4 pods x 4 cpu fill one rack; a hog takes half a rack
    w = world([*rack_cluster(racks=2, nodes_per_rack=2), topology("dc")])
    w.cluster.apply(make_kai_podgroup("train", min_member=N, topology=RACK))
    last_reason, reason_since, told_at = "", 0, {}
    for step, (op, arg) in enumerate(ops, start=1):
        before = dict(w.conditions)
        name = f"train-{arg}" if op in ("add", "delete", "filter") else ""
        if op == "add" and w.pod(name) is None:
            w.cluster.apply(gang_pod(name, "train", cpu="4"))
        elif op == "delete" and w.pod(name) is not None:
            w.cluster.delete("", "Pod", "default", name)
            w.waiting_calls.discard(f"default/{name}")
        elif op == "filter" and w.pod(name) is not None and not w.pod(name)["spec"].get("nodeName"):
            if w.filter(name) is not Verdict.PASS:
                writes = w.writes
                w.filter(name)  # kube-scheduler retrying the same pod at once
                assert w.writes == writes, "a repeated filter wrote again"
        elif op == "tick":
            w.tick(arg)
        elif op == "hog":
            hog = f"hog-{arg}"
            if w.pod(hog) is None:
                w.cluster.apply(make_pod(hog, cpu="8", node=f"n0{arg}0"))
            else:
                w.cluster.delete("", "Pod", "default", hog)
        w.settle()
        for pk, text in w.conditions.items():
            if before.get(pk) != text:
                told_at[pk] = step
        reason = w.gang_reason()
        if reason != last_reason:
            last_reason, reason_since = reason, step
        for pk, said in w.scheduler.told.pods.items():
            rec = w.store.pods.get(pk)
            if rec is None or rec.node_name:
                continue
            assert w.conditions.get(pk) == said, f"{pk}: the API shows {w.conditions.get(pk)!r}, not {said!r}"
            counts = " waiting for pods: " in said and " waiting for pods: " in reason
            held_back = counts and w.clock.now - w.scheduler.told.count_told_at[GANG] < QUORUM_COUNT_REFRESH_S
            assert said == reason or told_at.get(pk, 0) >= reason_since or held_back, (
                f"step {step}: {pk} still says {said!r}; the gang says {reason!r} since step {reason_since}"
            )
        # bounded: gangs the ledger knows, pods the cache holds, unbound
        told = w.scheduler.told
        assert {*told.gangs, *told.groups, *told.counts} <= set(w.scheduler.ledger.gangs)
        assert all(pk in w.store.pods and not w.store.pods[pk].node_name for pk in w.scheduler.told.pods)
