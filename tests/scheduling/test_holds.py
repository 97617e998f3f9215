"""Holds in the live filter path: a rack gang that fits nowhere holds the least used rack, small
gangs and plain pods plan around it, the rack drains, the gang starts there; priority takes the
head; a gang no drained cluster fits gets no hold and says so; a hold is charged to its queue;
holds off leaves the large gang to starve; a restarted service chooses the hold again.

The scheduler is driven directly over an embedded cluster, as the server drives it (see
test_queues.World), the ticker's pass run by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.scheduling.decisions import Verdict
from extender.scheduling.holds import HoldSettings
from extender.scheduling.scheduler import Scheduler
from extender.sim.cluster import topology
from tests.builders import gang_pod, make_kai_podgroup, make_pod, rack_cluster
from tests.scheduling.test_queues import World, kai_queue

RACK = {"topology": "dc", "requiredTopologyLevel": "rack"}


class HoldWorld(World):
    def __init__(self, objects: list[dict[str, Any]], *, holds: HoldSettings | None = None) -> None:
        super().__init__([*rack_cluster(racks=2, nodes_per_rack=4, cpu="8"), topology("dc"), *objects])
        self.scheduler = Scheduler(self.store, self.ledger(holds=holds))

    def rack_gang(
        self,
        name: str,
        size: int,
        cpu: str,
        *,
        queue: str = "default-queue",
        prio: int = 0,
        apart: bool = False,
    ) -> list[str]:
        """`apart`: each member must be alone on its node (anti-affinity to its gang on the hostname)."""
        self.cluster.apply(make_kai_podgroup(name, min_member=size, queue=queue, topology=RACK))
        names = [f"{name}-{i}" for i in range(size)]
        for pod in names:
            obj = gang_pod(pod, name, cpu=cpu, memory="1Gi", labels={"job": name})
            obj["spec"]["priority"] = prio
            if apart:
                term = {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"job": name}},
                }
                obj["spec"]["affinity"] = {
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
                }
            self.cluster.apply(obj)
        return names

    def tick(self) -> list[Any]:
        return self.scheduler.tick(synced=True).effects

    def rack_of(self, name: str) -> str:
        return self.node_rack(self.pod(name)["spec"]["nodeName"])

    def node_rack(self, node: str) -> str:
        obj = self.cluster.get("", "Node", None, node)
        assert obj is not None
        return obj["metadata"]["labels"]["topology.kubernetes.io/rack"]

    def hold(self, gang: str) -> dict[str, Any] | None:
        return self.scheduler.describe(f"default/{gang}")["hold"]

    def delete(self, *names: str) -> None:
        for n in names:
            self.cluster.delete("", "Pod", "default", n)


def fill(w: HoldWorld, *, queue: str = "default-queue") -> tuple[list[str], list[str]]:
    """b: 24 cpu, three nodes of one rack; a: 12 cpu, a node and a half of the other (tightest fit);
    both at a priority no other gang here preempts."""
    b = w.rack_gang("b", 6, "4", queue=queue, prio=100)
    w.schedule(*b)
    a = w.rack_gang("a", 3, "4", queue=queue, prio=100)
    w.schedule(*a)
    assert w.bound(*a, *b) and w.rack_of(a[0]) != w.rack_of(b[0])
    return a, b


def test_a_large_gang_holds_the_least_used_rack_others_go_around_it_and_it_starts_once_drained() -> None:
    w = HoldWorld([])
    a, b = fill(w)
    big = w.rack_gang("big", 4, "8")  # a whole rack
    decision = w.filter(big[0])
    assert decision.verdict is Verdict.NO_FIT
    assert w.hold("big") is None  # chosen by the ticker's pass, not by a filter
    w.tick()
    hold = w.hold("big")
    assert hold is not None and hold["domain"] == f"rack {w.rack_of(a[0])}"  # the least used rack
    assert hold["heldNodes"] == 4 and hold["drainedNodes"] == 2 and hold["rank"] == 1
    assert hold["text"] == f"gang default/big holds rack {w.rack_of(a[0])} (2 of 4 nodes drained)"
    # a gang that would fit only beside a does not: the rack is held, and it is told so
    c = w.rack_gang("c", 4, "4")
    told = w.filter(c[0])
    assert told.verdict is Verdict.NO_FIT
    assert f"rack {w.rack_of(a[0])} is held for gang default/big" in told.reason
    assert w.scheduler.describe("default/c")["heldFor"] == [hold["text"]]
    # a plain pod goes where the hold leaves room (b's rack), never onto the held rack
    w.cluster.apply(make_pod("plain", cpu="4", memory="1Gi"))
    passed = w.filter("plain").passed
    assert passed and {w.node_rack(n) for n in passed} == {w.rack_of(b[0])}
    # the gang on the held rack finishes: the hold is ready, the large gang nudged and planned there
    w.delete(*a)
    effects = w.tick()
    assert ("nudge", big[0]) in {(e.kind, e.name) for e in effects}
    w.schedule(*big)
    assert w.bound(*big) and {w.rack_of(n) for n in big} == {hold["domain"].split()[1]}
    w.tick()
    assert w.hold("big") is None  # it started: the hold is its plan's, then its pods'
    assert [h.gang for h in w.scheduler.ledger.holds.all()] == ["default/c"]  # the next in line holds


def test_a_hold_split_by_a_relabel_is_chosen_again_in_one_rack() -> None:
    """A rack gang holds a whole rack; an operator moves one of the held nodes to the other rack. The
    hold would span two racks, where the gang can never start (it was ready and nudged forever, in a
    randomized run): the next pass chooses it again, in the one rack that can take it once drained
    (the other has three nodes left)."""
    w = HoldWorld([])
    fill(w)
    big = w.rack_gang("big", 4, "8")
    assert w.filter(big[0]).verdict is Verdict.NO_FIT
    w.tick()
    held = w.scheduler.ledger.holds.of("default/big")
    assert held is not None and len({w.node_rack(n) for n in held.nodes}) == 1
    moved = held.nodes[0]
    other = next(r for r in ("r00", "r01") if r != w.node_rack(moved))
    node = w.cluster.get("", "Node", None, moved)
    labels = {**node["metadata"]["labels"], "topology.kubernetes.io/rack": other}
    w.cluster.apply({**node, "metadata": {**node["metadata"], "labels": labels}})
    w.scheduler.ledger.clock.now += 2  # type: ignore[attr-defined]  # the pass is due
    w.tick()
    again = w.scheduler.ledger.holds.of("default/big")
    assert again is not None and again.nodes != held.nodes
    assert {w.node_rack(n) for n in again.nodes} == {other}, again.nodes


def test_a_gang_whose_members_must_be_alone_holds_a_node_for_each_and_starts_one_per_node() -> None:
    """Four members of 2 cpu, one per node, in one rack: the rack of a has room for each but on three
    nodes only; b's has one free node. Held one node each in a's rack (the least used); a small gang
    still uses what the hold leaves on the held nodes; once a ends, the gang starts one per node."""
    w = HoldWorld([])
    a, b = fill(w)
    apart = w.rack_gang("apart", 4, "2", apart=True)
    assert w.filter(apart[0]).verdict is Verdict.NO_FIT
    w.tick()
    hold = w.hold("apart")
    assert hold is not None, w.scheduler.describe("default/apart")
    assert hold["domain"] == f"rack {w.rack_of(a[0])}" and hold["heldNodes"] == 4
    assert hold["drainedNodes"] == 3  # a's full node must drain; 2 cpu is free on the others
    # the room the hold leaves on its nodes is not withheld: 4 cpu beside a's half-used node
    w.cluster.apply(make_pod("plain", cpu="6", memory="1Gi"))
    passed = w.filter("plain").passed
    assert w.rack_of(a[0]) in {w.node_rack(n) for n in passed}
    w.delete(*a)
    effects = w.tick()
    assert ("nudge", apart[0]) in {(e.kind, e.name) for e in effects}
    w.schedule(*apart)
    nodes = [w.pod(n)["spec"]["nodeName"] for n in apart]
    assert w.bound(*apart) and len(set(nodes)) == 4
    assert {w.node_rack(n) for n in nodes} == {hold["domain"].split()[1]} != {w.rack_of(b[0])}


def test_without_holds_the_small_gang_takes_the_draining_rack_and_the_large_one_still_waits() -> None:
    w = HoldWorld([], holds=HoldSettings(enabled=False))
    a, _ = fill(w)
    big = w.rack_gang("big", 4, "8")
    assert w.filter(big[0]).verdict is Verdict.NO_FIT
    w.tick()
    assert w.hold("big") is None
    c = w.rack_gang("c", 4, "4")
    w.schedule(*c)
    assert w.bound(*c) and w.rack_of(c[0]) == w.rack_of(a[0])  # the rack the large gang needs
    w.delete(*a)
    w.tick()
    assert w.filter(big[0]).verdict is Verdict.NO_FIT  # c is there now: the large gang starves


def test_the_higher_priority_gang_takes_the_head_and_the_other_plans_around_it() -> None:
    w = HoldWorld([], holds=HoldSettings(depth=2))
    a, b = fill(w)
    low = w.rack_gang("low", 4, "8", prio=1)
    w.filter(low[0])
    w.tick()
    assert w.hold("low")["rank"] == 1
    high = w.rack_gang("high", 4, "8", prio=10)
    w.filter(high[0])
    w.tick()
    assert w.hold("high")["rank"] == 1 and w.hold("high")["domain"] == f"rack {w.rack_of(a[0])}"
    # the second hold is taken from what the first leaves: the other rack
    assert w.hold("low")["rank"] == 2 and w.hold("low")["domain"] == f"rack {w.rack_of(b[0])}"
    assert w.scheduler.describe("default/low")["heldFor"] == [w.hold("high")["text"]]


def test_a_gang_no_drained_cluster_fits_gets_no_hold_and_says_so() -> None:
    w = HoldWorld([])
    huge = w.rack_gang("huge", 5, "8")  # five whole nodes in one rack of four
    assert w.filter(huge[0]).verdict is Verdict.NO_FIT
    w.tick()
    assert w.hold("huge") == {"none": "no hold: it fits nowhere even on an empty cluster"}
    assert w.scheduler.ledger.holds.all() == []


def test_a_hold_is_charged_to_its_queue_and_its_limit_holds_with_the_hold_in_place() -> None:
    w = HoldWorld([kai_queue("team", cpu={"quota": 8000, "limit": 68000})])
    a, _b = fill(w, queue="team")  # team uses 36 cpu
    big = w.rack_gang("big", 4, "8", queue="team")  # 32 more: within the limit, but fits no rack now
    assert w.filter(big[0]).verdict is Verdict.NO_FIT
    w.tick()
    assert w.hold("big")["room"]["cpu"] == 32000 and w.hold("big")["queue"] == "team"
    team = w.scheduler.describe_queues()["queues"][0]
    assert team["queue"] == "team" and team["resources"]["cpu"]["allocated"] == 68000
    # the queue is at its limit with the hold counted: another gang of it waits, saying so
    c = w.rack_gang("c", 2, "1", queue="team")
    decision = w.filter(c[0])
    assert decision.verdict is Verdict.WAITING
    assert "queue team: cpu limit 68000m, in use 68000m, gang needs 2000m" in decision.reason
    # the holder itself is admitted again (its own hold is not counted twice) once its rack drains
    w.delete(*a)
    w.tick()
    w.schedule(*big)
    assert w.bound(*big)


def test_a_queue_that_cannot_take_the_hold_gives_none() -> None:
    w = HoldWorld([kai_queue("team", cpu={"quota": 8000, "limit": 68000})])
    _a, _b = fill(w, queue="team")
    big = w.rack_gang("big", 4, "8", queue="team")
    assert w.filter(big[0]).verdict is Verdict.NO_FIT
    # the limit lowered after the gang was admitted: its queue cannot be charged the room
    w.cluster.apply(kai_queue("team", cpu={"quota": 8000, "limit": 40000}))
    w.tick()
    assert w.hold("big") == {
        "none": "no hold: queue team: cpu limit 40000m, in use 36000m, gang needs 32000m"
    }


def test_a_restarted_service_chooses_the_hold_again_from_the_cluster() -> None:
    w = HoldWorld([])
    _a, _b = fill(w)
    big = w.rack_gang("big", 4, "8")
    w.filter(big[0])
    w.tick()
    first = w.hold("big")
    # a new process over the same objects: nothing is remembered; the filter finds the no-fit again
    # and the pass holds the same rack, chosen from the cluster alone
    again = World(w.cluster.all_objects())
    assert again.scheduler.describe("default/big")["hold"] is None
    again.filter(big[0])
    again.scheduler.tick(synced=True)
    assert again.scheduler.describe("default/big")["hold"]["nodes"] == first["nodes"]


@pytest.mark.parametrize("depth", [0, -1])
def test_hold_depth_below_one_is_refused_with_why(depth: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HoldSettings(depth=depth)


def test_a_hold_keeps_no_room_from_work_of_higher_priority() -> None:
    w = HoldWorld([])
    fill(w)
    big = w.rack_gang("big", 4, "8", prio=10)
    w.filter(big[0])
    w.tick()
    held = w.hold("big")["domain"].split()[-1]
    # the spare quarter node beside a: refused to a plain pod of lower priority, open to a higher one
    w.cluster.apply(make_pod("low", cpu="4", memory="1Gi"))
    passed = w.filter("low").passed
    assert passed and all(w.node_rack(n) != held for n in passed)
    high = make_pod("high", cpu="4", memory="1Gi")
    high["spec"]["priority"] = 50
    w.cluster.apply(high)
    assert any(w.node_rack(n) == held for n in w.filter("high").passed)


def park(w: HoldWorld, names: list[str]) -> None:
    """kube-scheduler's own filters passed no node: it marks the pods unschedulable, asking no one."""
    for name in names:
        pod = w.pod(name)
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/8 nodes"}
        w.cluster.apply({**pod, "status": {**(pod.get("status") or {}), "conditions": [cond]}})


@pytest.mark.parametrize("asked_later", [False, True], ids=["never-asked", "asked-later"])
def test_a_parked_gang_ranks_by_when_it_was_first_parked(asked_later: bool) -> None:
    """Not by each pass, nor by the ledger's entry a filter makes when kube-scheduler at last sees room
    on one node and asks (the e2e's defect: the gang became younger than the one that came in between,
    which then took the rack held for it, and bound there)."""
    w = HoldWorld([])
    fill(w)
    big = w.rack_gang("big", 4, "8")
    clock = w.scheduler.ledger.clock
    parked_at = clock()
    park(w, big)
    w.tick()
    clock.now += 30  # type: ignore[attr-defined]
    later = w.rack_gang("ahead", 4, "8")  # a name that sorts first: only the age can put big first
    assert w.filter(later[0]).verdict is Verdict.NO_FIT
    if asked_later:
        clock.now += 1  # type: ignore[attr-defined]
        assert w.filter(big[0]).verdict is Verdict.NO_FIT  # the ledger's entry for big is made now
    ranked = [(x.key, x.since_s) for x in w.scheduler.holding.waiting()]
    assert ranked[0] == ("default/big", parked_at), ranked
    w.tick()
    assert w.scheduler.ledger.holds.all()[0].gang == "default/big"


def test_gangs_rank_by_when_they_were_created_whichever_the_service_is_asked_about_first() -> None:
    """A restarted service (or one that saw the older gang only parked) ranks by what the API server
    keeps: the members' creationTimestamp, to the second."""
    w = HoldWorld([])
    fill(w)
    for name, stamp in (("old", "2026-12-06T05:00:00Z"), ("new", "2026-12-06T05:01:00Z")):
        w.cluster.apply(make_kai_podgroup(name, min_member=4, topology=RACK))
        for i in range(4):
            pod = gang_pod(f"{name}-{i}", name, cpu="8", memory="1Gi")
            pod["metadata"]["creationTimestamp"] = stamp
            w.cluster.apply(pod)
    assert w.filter("new-0").verdict is Verdict.NO_FIT  # asked about first
    w.scheduler.ledger.clock.now += 5  # type: ignore[attr-defined]
    assert w.filter("old-0").verdict is Verdict.NO_FIT
    assert [x.key for x in w.scheduler.holding.waiting()] == ["default/old", "default/new"]
    w.tick()
    assert w.scheduler.ledger.holds.all()[0].gang == "default/old"


def test_a_gang_with_no_creation_time_still_ranks_and_holds() -> None:
    """A cluster file's pods may carry creationTimestamp: null: ranked after gangs with one, by when
    first seen, and the pass holds for them as for any other."""
    w = HoldWorld([])
    fill(w)
    w.cluster.apply(make_kai_podgroup("nostamp", min_member=4, topology=RACK))
    for i in range(4):
        pod = gang_pod(f"nostamp-{i}", "nostamp", cpu="8", memory="1Gi")
        pod["metadata"]["creationTimestamp"] = None
        w.cluster.apply(pod)
    assert w.filter("nostamp-0").verdict is Verdict.NO_FIT
    assert [x.key for x in w.scheduler.holding.waiting()] == ["default/nostamp"]
    w.tick()
    assert w.scheduler.ledger.holds.all()[0].gang == "default/nostamp"


def test_a_gang_kube_scheduler_parked_without_asking_the_service_holds_too() -> None:
    """Members that each fit no node's free room fail kube-scheduler's own filters: the extender is
    never asked. Parked (PodScheduled=False), the gang still holds, and its members are brought back
    when the hold is ready."""
    w = HoldWorld([])
    a, _ = fill(w)
    big = w.rack_gang("big", 4, "8")  # whole nodes: none has 8 cpu free beside a and b
    park(w, big)
    assert w.scheduler.describe("default/big") is not None  # its members exist; no filter ever ran
    w.tick()
    hold = w.hold("big")
    assert hold is not None and hold["domain"] == f"rack {w.rack_of(a[0])}"
    w.delete(*a)
    effects = w.tick()
    assert sorted(e.name for e in effects if e.kind == "nudge") == sorted(big)
    w.schedule(*big)
    assert w.bound(*big)


def test_an_older_gang_the_pass_finds_fits_now_starts_in_a_younger_gangs_held_rack() -> None:
    """A gang created before the holder, of its priority, fits now in the rack the holder holds: the
    pass ranks it first and finds it fits, so it holds nothing and is to start at its next try. Its
    filter then plans around the holds ranked before it, none, not around every hold of its priority:
    else it waits behind a hold the pass never ranked before it, and the pass, finding it fits, never
    holds for it (interleavings kill seed 2040: a gang kept waiting for good)."""
    w = HoldWorld([], holds=HoldSettings(pools=False))
    a, _b = fill(w)
    big = w.rack_gang("big", 4, "8")
    assert w.filter(big[0]).verdict is Verdict.NO_FIT
    w.tick()
    hold = w.hold("big")
    assert hold is not None and hold["domain"] == f"rack {w.rack_of(a[0])}"
    w.cluster.apply(make_kai_podgroup("old", min_member=2, topology=RACK))
    for i in range(2):
        pod = gang_pod(f"old-{i}", "old", cpu="8", memory="1Gi")
        pod["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
        w.cluster.apply(pod)
    assert w.filter("old-0").verdict is Verdict.NO_FIT  # around big's hold, before the pass ranks it
    w.tick()
    assert [x.key for x in w.scheduler.holding.waiting()] == ["default/old", "default/big"]
    decisions = w.schedule("old-0", "old-1")
    assert w.bound("old-0", "old-1"), {n: (d.verdict, d.reason) for n, d in decisions.items()}
    assert {w.rack_of("old-0"), w.rack_of("old-1")} == {w.rack_of(a[0])}


def _cordon(node: dict[str, Any]) -> dict[str, Any]:
    return {**node, "spec": {**node.get("spec", {}), "unschedulable": True}}


def _not_ready(node: dict[str, Any]) -> dict[str, Any]:
    return {**node, "status": {**node["status"], "conditions": [{"type": "Ready", "status": "False"}]}}


def _lowered(node: dict[str, Any]) -> dict[str, Any]:
    return {
        **node,
        "status": {**node["status"], "allocatable": {**node["status"]["allocatable"], "cpu": "4"}},
    }


@pytest.mark.parametrize(
    "edit",
    [_cordon, _not_ready, _lowered, None],
    ids=["cordoned", "not-ready", "allocatable-lowered", "deleted"],
)
def test_a_hold_a_node_can_no_longer_take_goes_at_the_nodes_event(edit: Any) -> None:
    """A rack held for a large gang loses a node's worth of room (cordoned, NotReady, its
    allocatable lowered below the hold, deleted): the hold can never be ready, and goes at the
    node's event, not at the next pass. A deleted node's row is free at once and may be taken by
    any node registered next: a hold left on it would keep that node's room from everyone."""
    w = HoldWorld([])
    a, _ = fill(w)
    big = w.rack_gang("big", 4, "8")
    assert w.filter(big[0]).verdict is Verdict.NO_FIT
    w.tick()
    hold = w.hold("big")
    assert hold is not None
    held_node = w.pod(a[0])["spec"]["nodeName"]
    node = w.cluster.get("", "Node", None, held_node)
    if edit is None:
        w.cluster.delete("", "Node", None, held_node)
    else:
        w.cluster.apply(edit(node))
    assert w.hold("big") is None
    assert w.scheduler.ledger.holds.all() == []
