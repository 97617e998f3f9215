"""The gang ledger's verbs on plain objects: each completes or leaves the state as it was."""

from __future__ import annotations

import copy

import pytest

from extender.gang.entry import Arrival, PlannedPod
from extender.model.group import GroupSpec, Source
from extender.scheduling.ledger import GangLedger
from extender.state.store import ClusterStore
from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod

GANG = "default/train"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def setup(n: int = 3) -> tuple[ClusterStore, GangLedger, Clock, GroupSpec]:
    store = ClusterStore()
    for i in range(3):
        store.upsert(make_node(f"n{i}", cpu="4"))
    store.upsert(make_kai_podgroup("train", min_member=n))
    for i in range(n):
        store.upsert(
            {
                **gang_pod(f"train-{i}", "train", cpu="1"),
                "metadata": {**gang_pod(f"train-{i}", "train")["metadata"], "uid": f"u{i}"},
            }
        )
    clock = Clock()
    ledger = GangLedger(
        store, wait_s=5, backoff_initial_s=2, backoff_max_s=60, clock=clock, release_on_first_bind=False
    )
    spec = GroupSpec(key=GANG, source=Source.KAI_PODGROUP, min_member=n)
    return store, ledger, clock, spec


def assignment(n: int, nodes: list[str]) -> dict:
    return {
        f"default/train-{i}": (PlannedPod(nodes[i], f"u{i}", None), {"cpu": 1000, "pods": 1})
        for i in range(n)
    }


def early_ledger(store: ClusterStore, clock: Clock, *, on: bool = True) -> GangLedger:
    """A ledger as `setup` makes it, releasing plans at their first member's bind (`on`)."""
    return GangLedger(
        store, wait_s=5, backoff_initial_s=2, backoff_max_s=60, clock=clock, release_on_first_bind=on
    )


def snapshot(store: ClusterStore, ledger: GangLedger):
    return (
        store.arrays.free.copy().tolist(),
        dict(store.reservations),
        copy.deepcopy(ledger.gangs),
        dict(ledger._pod_gang),
    )


def test_a_plan_that_cannot_be_held_whole_leaves_nothing_behind(monkeypatch):
    store, ledger, _, spec = setup()
    before = snapshot(store, ledger)
    real, calls = store.hold, []

    def flaky(key, node, requests):
        calls.append(key)
        if len(calls) == 3:
            raise MemoryError("while holding the third member")
        real(key, node, requests)

    monkeypatch.setattr(store, "hold", flaky)
    with pytest.raises(MemoryError):
        ledger.plan(spec, assignment(3, ["n0", "n1", "n2"]), domain="")
    assert snapshot(store, ledger)[:2] == before[:2]
    assert not ledger.planned("default/train-0")


def test_a_plan_naming_a_node_the_cache_lacks_is_refused_before_anything_moves():
    store, ledger, _, spec = setup()
    before = snapshot(store, ledger)
    with pytest.raises(RuntimeError, match="not in the cache"):
        ledger.plan(spec, assignment(3, ["n0", "n1", "ghost"]), domain="")
    assert snapshot(store, ledger)[:2] == before[:2]


def test_the_barrier_releases_only_when_every_planned_member_arrived():
    _store, ledger, _clock, spec = setup()
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="")
    assert ledger.arrive("default/train-0", "n1", "u0")[0] is Arrival.WRONG_NODE
    assert ledger.arrive("default/train-0", "n0", "other-uid")[0] is Arrival.NOT_PLANNED
    assert ledger.arrive("default/train-0", "n0", "u0")[0] is Arrival.WAIT
    assert ledger.arrive("default/train-1", "n0", "u1")[0] is Arrival.WAIT
    outcome, _, members = ledger.arrive("default/train-2", "n1", "u2")
    assert outcome is Arrival.RELEASE and [m.pod for m in members] == [f"default/train-{i}" for i in range(3)]
    assert ledger.arrive("default/train-2", "n1", "u2")[0] is Arrival.IN_FLIGHT
    assert ledger.expire() == []  # in flight: the binds answer for themselves


def test_settle_keeps_refused_members_planned_and_held_and_rearms_the_deadline():
    store, ledger, clock, spec = setup()
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="rack r0")
    for i, node in enumerate(["n0", "n0", "n1"]):
        ledger.arrive(f"default/train-{i}", node, f"u{i}")
    settled = ledger.settle(
        GANG, {"default/train-0": "", "default/train-1": "refused", "default/train-2": "refused"}
    )
    assert settled.bound == ("default/train-0",) and not settled.quorum_bound
    assert ledger.assumed == {"default/train-0": "n0"}  # the watch has not shown it yet: still held
    assert set(store.reservations) == {f"default/train-{i}" for i in range(3)}
    assert ledger.entry(GANG).hold_until >= clock.now + 5  # the refused members must come back in time
    clock.now = ledger.entry(GANG).hold_until + 0.1
    (expiry,) = ledger.expire()
    assert "no planned member reached bind" in expiry.message
    assert set(store.reservations) == {"default/train-0"}  # only the bound member's hold remains
    pod = store.pods["default/train-0"].obj
    store.upsert({**pod, "spec": {**pod["spec"], "nodeName": "n0"}})  # the watch catches up
    assert store.reservations == {} and ledger.assumed == {}


def test_only_a_member_new_to_the_plans_barrier_keeps_the_plan():
    """The plan's hold (hold_s, 15 s here) ends that long after the last member that reached bind
    for the first time under it: one moved, refused by the API, or answered and back again keeps
    nothing alive, and one arriving after the hold ended revives nothing."""
    store, ledger, clock, spec = setup()
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="")
    start = clock.now
    assert ledger.arrive("default/train-0", "n0", "u0")[0] is Arrival.WAIT
    clock.now += 10
    assert ledger.arrive("default/train-1", "n0", "u1")[0] is Arrival.WAIT  # new: the hold moves on
    assert ledger.entry(GANG).hold_until == clock.now + 15
    ledger.move(GANG, "default/train-0", "n2", {"cpu": 1000, "pods": 1})
    clock.now += 10
    assert ledger.arrive("default/train-0", "n2", "u0")[0] is Arrival.WAIT  # moved and back: not new
    assert ledger.entry(GANG).hold_until == start + 25
    clock.now = start + 25.1
    (expiry,) = ledger.expire()
    assert "no new planned pod arrived within 15s (2 of 3 planned pods arrived)" in expiry.message
    assert store.reservations == {}
    # a plan whose hold has ended, not yet expired by the ticker, is not revived by a new member
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="")
    clock.now += 15.5
    assert ledger.arrive("default/train-2", "n1", "u2")[0] is Arrival.WAIT
    assert ledger.entry(GANG).hold_until < clock.now
    assert len(ledger.expire()) == 1 and store.reservations == {}


HOST_PORT = {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}


@pytest.mark.parametrize(
    ("on", "own_cycle", "arrivals"),
    [
        # the barrier: every member reaches bind through its own kube-scheduler cycle
        (False, (), [("train-0", Arrival.WAIT), ("train-1", Arrival.WAIT), ("train-2", Arrival.RELEASE)]),
        # released at the first member's bind, the others bound on their planned nodes
        (True, (), [("train-0", Arrival.RELEASE)]),
        # a member with a host port is bound only once kube-scheduler has filtered it on its node
        (True, ("train-2",), [("train-0", Arrival.WAIT), ("train-2", Arrival.RELEASE)]),
        (True, ("train-2",), [("train-2", Arrival.RELEASE)]),
    ],
    ids=["barrier", "first-bind", "host-port-waits", "host-port-first"],
)
def test_a_plan_released_at_its_first_bind_waits_only_for_members_its_plan_cannot_vouch_for(
    on, own_cycle, arrivals
):
    store, _, clock, spec = setup()
    for name in own_cycle:
        pod = copy.deepcopy(store.pods[f"default/{name}"].obj)
        pod["spec"] |= HOST_PORT
        store.upsert(pod)
    ledger = early_ledger(store, clock, on=on)
    nodes = {"train-0": "n0", "train-1": "n0", "train-2": "n1"}
    ledger.plan(spec, assignment(3, list(nodes.values())), domain="")
    for name, expected in arrivals:
        arrival, _, members = ledger.arrive(f"default/{name}", nodes[name], f"u{name[-1]}")
        assert arrival is expected
    # the release binds every planned member where planned, with the uid its plan was made for
    assert sorted((m.pod, m.node, m.uid) for m in members) == [
        (f"default/{n}", node, f"u{n[-1]}") for n, node in sorted(nodes.items())
    ]
    assert ledger.is_releasing("default/train-1")


def test_a_plan_with_a_member_being_deleted_is_not_released_at_its_first_bind():
    """A planned member with a deletionTimestamp (a finalizer keeps it) would be refused by the API and
    the rest bound without it: the plan waits at the barrier instead, as kube-scheduler never cycles
    such a pod, and expires."""
    store, _, clock, spec = setup()
    ledger = early_ledger(store, clock)
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="")
    going = copy.deepcopy(store.pods["default/train-2"].obj)
    going["metadata"] |= {"deletionTimestamp": "2026-12-06T00:00:00Z", "finalizers": ["batch/tracking"]}
    store.upsert(going)
    assert ledger.arrive("default/train-0", "n0", "u0")[0] is Arrival.WAIT
    assert not ledger.is_releasing("default/train-1")


@pytest.mark.parametrize("bound_since_the_plan", [False, True], ids=["before-the-plan", "since-the-plan"])
def test_a_member_a_bound_pods_anti_affinity_selects_waits_for_its_own_cycle(bound_since_the_plan):
    """kube-scheduler's InterPodAffinity holds a bound pod's required anti-affinity against the pods it
    places; the plan does not model it: a member such a term selects reaches bind first."""
    store, _, clock, spec = setup()
    repeller = make_pod("db", cpu="1", node="n2")
    repeller["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {
                        "matchLabels": dict(store.pods["default/train-2"].obj["metadata"].get("labels") or {})
                    },
                }
            ]
        }
    }
    ledger = early_ledger(store, clock)
    if not bound_since_the_plan:
        store.upsert(repeller)
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="")
    if bound_since_the_plan:
        store.upsert(repeller)
    assert ledger.arrive("default/train-0", "n0", "u0")[0] is Arrival.WAIT
    assert ledger.arrive("default/train-1", "n0", "u1")[0] is Arrival.WAIT
    assert ledger.arrive("default/train-2", "n1", "u2")[0] is Arrival.RELEASE


@pytest.mark.parametrize("change", ["label", "taint"])
def test_a_member_whose_planned_node_no_longer_admits_it_waits_for_its_own_cycle(change):
    """The plan was made where the member's selector and tolerations admitted it; the node's labels or
    taints changed since. Released without its own cycle it would be bound where kube-scheduler's
    NodeAffinity or TaintToleration would refuse it (and the kubelet rejects it): the plan is dropped
    when the node changes, with the reason, and nothing is released."""
    store, _, clock, spec = setup()
    picky = copy.deepcopy(store.pods["default/train-2"].obj)
    picky["spec"]["nodeSelector"] = {"pool": "a"}
    store.upsert(picky)
    node = make_node("n1", cpu="4")
    node["metadata"]["labels"]["pool"] = "a"
    store.upsert(node)
    ledger = early_ledger(store, clock)
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="")
    node = copy.deepcopy(node)
    if change == "label":
        node["metadata"]["labels"]["pool"] = "b"
    else:
        node["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    store.upsert(node)
    entry = ledger.entry(GANG)
    assert entry is not None and not entry.plan
    assert entry.last_reason == (
        "planned node n1 no longer admits member default/train-2 (its labels or taints changed); replanning"
    )
    assert ledger.arrive("default/train-0", "n0", "u0")[0] is not Arrival.RELEASE
    assert not ledger.is_releasing("default/train-2")


def test_after_a_partial_release_the_rest_is_released_at_its_next_bind():
    """A member only its own cycle vouches for, bound by a release whose other bindings the API
    refused, is no longer waited for: the next refused member to reach bind releases the rest."""
    store, _, clock, spec = setup()
    pod = copy.deepcopy(store.pods["default/train-0"].obj)
    pod["spec"] |= HOST_PORT
    store.upsert(pod)
    ledger = early_ledger(store, clock)
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="")
    arrival, _, members = ledger.arrive("default/train-0", "n0", "u0")
    assert arrival is Arrival.RELEASE and len(members) == 3
    refused = "the API refused it"
    ledger.settle(GANG, {"default/train-0": "", "default/train-1": refused, "default/train-2": refused})
    arrival, _, members = ledger.arrive("default/train-1", "n0", "u1")
    assert arrival is Arrival.RELEASE
    assert sorted(m.pod for m in members) == ["default/train-1", "default/train-2"]


def test_a_member_deleted_mid_wait_queues_answers_for_the_waiting_binds():
    store, ledger, _, spec = setup()
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="")
    ledger.arrive("default/train-0", "n0", "u0")
    store.remove(store.pods["default/train-2"].obj)
    (answer,) = ledger.take_answers()
    assert answer.pods == ("default/train-0",) and "member default/train-2 was deleted" in answer.message
    assert store.reservations == {} and ledger.take_answers() == []


def test_a_hold_on_a_removed_node_gives_nothing_back_to_the_row_s_next_owner():
    store, ledger, _, spec = setup()
    ledger.plan(spec, assignment(3, ["n0", "n0", "n2"]), domain="")
    row = store.node_rows["n2"]
    node = store.node("n2")
    store.remove(node)  # the ledger drops the plan and unholds: the row is gone by then
    store.upsert(make_node("n9", cpu="4"))  # reuses the row
    assert store.node_rows["n9"] == row
    assert store.arrays.free[row, 0] == 4000
    assert store.reservations == {}


def test_a_member_whose_binding_landed_though_its_reply_was_lost_counts_as_bound():
    """The API server died mid-release: one POST bound its pod but the reply never came (the retries
    then met a refused connection). The watch showed the binding while the release was in flight. Left
    planned, that member would never reach the barrier again and hold its gang there until the hold
    ended (an e2e fault run on 1.36.2: a gang partly bound for 6 s)."""
    store, ledger, _clock, spec = setup()
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="rack r0")
    for i, node in enumerate(["n0", "n0", "n1"]):
        ledger.arrive(f"default/train-{i}", node, f"u{i}")
    pod = store.pods["default/train-1"].obj
    store.upsert({**pod, "spec": {**pod["spec"], "nodeName": "n0"}})  # the watch, mid-release
    lost = "Cannot connect to host"
    settled = ledger.settle(GANG, {f"default/train-{i}": lost for i in range(3)})
    assert settled.bound == ("default/train-1",) and settled.failed == ("default/train-0", "default/train-2")
    assert set(ledger.entry(GANG).plan) == {"default/train-0", "default/train-2"}
    assert "default/train-1" not in store.reservations, "its own charge replaced the hold"
    # the two kube-scheduler retries are the whole barrier now
    assert ledger.arrive("default/train-0", "n0", "u0")[0] is Arrival.WAIT
    assert ledger.arrive("default/train-2", "n1", "u2")[0] is Arrival.RELEASE


@pytest.mark.parametrize(
    ("foreign_cpu", "releasing", "dropped"),
    [
        ("1", False, False),  # fits beside the plan's holds: the plan stands
        ("3", False, True),  # the node no longer has the room the plan holds: dropped, not released
        ("3", True, False),  # a release in flight is past recall
    ],
)
def test_a_plan_on_a_node_someone_else_filled_is_dropped_before_it_can_overcommit(
    foreign_cpu, releasing, dropped
):
    """A restarted service planned on a node where its predecessor's release POSTs were still in flight;
    they landed afterwards. An e2e fault run on 1.36.2 bound both: cpu 6000 requested of 4000."""
    store, ledger, _clock, spec = setup()
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="rack r0")
    ledger.arrive("default/train-0", "n0", "u0")
    if releasing:
        ledger.arrive("default/train-1", "n0", "u1")
        assert ledger.arrive("default/train-2", "n1", "u2")[0] is Arrival.RELEASE
    foreign = gang_pod("landed", "other", cpu=foreign_cpu)
    store.upsert({**foreign, "spec": {**foreign["spec"], "nodeName": "n0"}})
    entry = ledger.entry(GANG)
    assert bool(entry.plan) is not dropped
    if dropped:
        (answer,) = ledger.take_answers()
        assert answer.pods == ("default/train-0",)
        assert (
            "node n0 has less room than the plan holds: pods bound since the plan (default/landed among them)"
            in answer.message
        )
        assert store.reservations == {}
        assert (store.arrays.free[store.node_rows["n0"]] >= 0).all()


@pytest.mark.parametrize(
    ("arrived", "bound_on", "completed", "released"),
    [
        # the last missing member seen bound on its planned node: the rest are released at once
        (["train-0", "train-1"], "n1", [GANG], ["default/train-0", "default/train-1"]),
        # one still missing: the barrier waits for it as before
        (["train-0"], "n1", [], []),
        # bound elsewhere (another binder): the plan is dropped, nothing to release
        (["train-0", "train-1"], "n2", [], []),
    ],
)
def test_a_barrier_the_watch_completes_is_named_once_for_release(arrived, bound_on, completed, released):
    store, ledger, _, spec = setup()
    ledger.plan(spec, assignment(3, ["n0", "n0", "n1"]), domain="rack r0")
    for name in arrived:
        i = int(name.rsplit("-", 1)[1])
        assert ledger.arrive(f"default/{name}", "n0", f"u{i}")[0] is Arrival.WAIT
    pod = store.pods["default/train-2"].obj
    store.upsert({**pod, "spec": {**pod["spec"], "nodeName": bound_on}})
    assert ledger.completed() == completed
    assert [m.pod for gang in completed for m in ledger.release(gang)] == released
    assert ledger.completed() == [], "named once"
    if completed:
        assert all(ledger.is_releasing(pk) for pk in released)
        assert ledger.release(GANG) == [], "released once"


def test_a_preemption_started_after_its_victims_went_claims_only_what_is_free_beyond_their_room():
    """A preemption (re-armed, or restarted) whose victim went already, whose plan counts on more room
    than is free now (a Terminating pod's, on its way out): the victim's room is held for the gang
    first, and the claim takes only what is free beyond it. Claimed first, the claim took the
    victim's freed room too and holding it again over-held the node (interleavings seed 1282)."""
    from extender.scheduling.ledger import Preemption, Victim

    store, ledger, clock, _spec = setup(5)  # five 1-cpu members, 4-cpu nodes
    victim = Victim("default/v", "uv", "n0", {"cpu": 2000}, 0, None)  # gone already: n0 all free
    where = {f"default/train-{i}": "n0" for i in range(5)}  # 5 cpu: a going pod's room counted on
    p = Preemption(GANG, "", {"default/v": victim}, (), 100, clock.now + 60, where, "test", hold_s=60.0)
    ledger.start_preemption(p)
    row = store.node_rows["n0"]
    assert p.held == {"default/v"} and p.claimed["n0"]["cpu"] == 2000
    assert int(store.arrays.free[row][0]) == 0
