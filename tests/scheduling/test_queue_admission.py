"""Queue admission of gangs and preemptors, transition by transition: a gang has one queue decided for
the gang; a preemptor's held room counts toward its queue and it is admitted again when planned into
it; an in-queue preemption credits the victims it evicts; the preempt verb keeps KAI's queue rules for
plain pods too.

Driven over an embedded cluster as tests/scheduling/test_queues.py does (its World)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from extender.scheduling.decisions import FilterDecision, Verdict
from extender.scheduling.preemption import Outcome
from extender.sim.expand import expand
from tests.builders import gang_pod, make_kai_podgroup, make_pod
from tests.scheduling.test_queues import World, gpu_nodes, kai_queue

QUEUE = "kai.scheduler/queue"


def prioritized(w: World, names: list[str], priority: int) -> list[str]:
    for name in names:
        pod = w.pod(name)
        w.cluster.apply({**pod, "spec": {**pod["spec"], "priority": priority}})
    return names


def gang_at(w: World, name: str, size: int, queue: str, priority: int, gpu: str) -> list[str]:
    return prioritized(w, w.gang(name, size, queue, gpu=gpu), priority)


def gpus_in_use(w: World, queue: str) -> int:
    snap = w.scheduler.queue_snapshot()
    assert snap is not None
    return snap.allocated[queue]["nvidia.com/gpu"]


def evicted(decision: FilterDecision) -> set[str]:
    return {e.name for e in decision.effects if e.kind == "evict"}


def delete(w: World, names: set[str] | list[str]) -> None:
    for name in names:
        w.cluster.delete("", "Pod", "default", name)


# ----------------------------------------------------------------- 1. one queue per gang
DISAGREEING = "members name different queues: team-a (6 pods), team-b (2 pods)"


def test_a_podgroup_without_a_queue_whose_members_name_different_queues_is_not_admitted() -> None:
    # team-a may run 4 gpus. The members of g (no spec.queue) name team-a (6) and team-b (2): whichever
    # member is filtered, the gang is not admitted, and says which queues disagree
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 4, "limit": 4}),
            kai_queue("team-b", gpu={"quota": -1, "limit": -1}),
        ]
    )
    w.cluster.apply(make_kai_podgroup("g", min_member=8, queue=""))
    names = [f"g-{i}" for i in range(8)]
    for i, name in enumerate(names):
        w.cluster.apply(gang_pod(name, "g", gpu="1", labels={QUEUE: "team-a" if i < 6 else "team-b"}))
    for name in reversed(names):  # a team-b member first: it once admitted the gang against team-b
        decision = w.filter(name)
        assert decision.verdict is Verdict.WAITING, decision.reason
        assert DISAGREEING in decision.reason, decision.reason
    assert w.scheduler.ledger.entry("default/g").plan == {}
    assert not w.store.reservations
    assert w.scheduler.describe("default/g")["queue"] is None
    assert DISAGREEING in w.scheduler.describe("default/g")["queueHold"]
    assert w.scheduler.admission.holds_over() == [], "still disagreeing: no one is brought back"
    # the PodGroup names a queue: it wins over every member's label
    group = make_kai_podgroup("g", min_member=8, queue="team-b")
    w.cluster.apply(group)
    assert {e.name for e in w.scheduler.admission.holds_over() if e.kind == "nudge"} == set(names)
    decision = w.filter("g-0")
    assert decision.verdict is Verdict.PASS, decision.reason
    assert w.scheduler.describe("default/g")["queue"] == "team-b"


JOBSET_TWO_QUEUES = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: default}
spec:
  replicatedJobs:
  - name: driver
    replicas: 1
    template:
      spec:
        parallelism: 4
        completions: 4
        template:
          metadata: {labels: {kai.scheduler/queue: team-a}}
          spec:
            containers: [{name: w, image: sleep, resources: {requests: {cpu: "1", nvidia.com/gpu: "1"}}}]
  - name: workers
    replicas: 1
    template:
      spec:
        parallelism: 4
        completions: 4
        template:
          metadata: {labels: {kai.scheduler/queue: team-b}}
          spec:
            containers: [{name: w, image: sleep, resources: {requests: {cpu: "1", nvidia.com/gpu: "1"}}}]
"""


def test_a_jobset_whose_replicated_jobs_name_different_queues_is_not_admitted() -> None:
    objects = expand([yaml.safe_load(JOBSET_TWO_QUEUES)]).objects
    for o in objects:
        if o["kind"] == "Pod":
            o["spec"]["schedulerName"] = "gang-scheduler"
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 4, "limit": 4}),
            kai_queue("team-b", gpu={"quota": -1, "limit": -1}),
            *objects,
        ]
    )
    pods = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Pod")
    assert len(pods) == 8
    for name in pods:
        decision = w.filter(name)
        assert decision.verdict is Verdict.WAITING, (name, decision.reason)
        assert "members name different queues: team-a (4 pods), team-b (4 pods)" in decision.reason
    assert not w.store.reservations
    assert gpus_in_use(w, "team-a") == gpus_in_use(w, "team-b") == 0


def test_a_member_beyond_quorum_naming_another_queue_is_not_placed_in_it() -> None:
    # the gang of 2 (team-a) is bound; a third member naming team-b would be charged to team-b while
    # the gang's queue says team-a: it waits, saying so
    w = World([*gpu_nodes(1), kai_queue("team-a"), kai_queue("team-b")])
    w.cluster.apply(make_kai_podgroup("g", min_member=2, queue=""))
    for i in range(2):
        w.cluster.apply(gang_pod(f"g-{i}", "g", gpu="1", labels={QUEUE: "team-a"}))
    w.schedule("g-0", "g-1")
    assert w.bound("g-0", "g-1")
    w.cluster.apply(gang_pod("g-2", "g", gpu="1", labels={QUEUE: "team-b"}))
    decision = w.filter("g-2")
    assert decision.verdict is Verdict.WAITING
    assert "members name different queues: team-a (2 pods), team-b (1 pod)" in decision.reason


# ----------------------------------------------------------------- 4. a preemptor's held room
def preempting_world() -> tuple[World, list[str], list[str]]:
    """team-a (limit 16) runs `low` (8 gpus, priority 100) on node-0; team-b fills node-1 and node-2.
    `urgent` (team-a, 8 gpus, priority 1000) fits nowhere: it preempts `low` and holds its room."""
    w = World(
        [
            *gpu_nodes(3),
            kai_queue("team-a", gpu={"quota": 16, "limit": 16}),
            kai_queue("team-b", gpu={"quota": 16, "limit": -1}),
        ]
    )
    low = gang_at(w, "low", 2, "team-a", 100, "4")
    w.schedule(*low)
    b = gang_at(w, "b", 4, "team-b", 100, "4")
    w.schedule(*b)
    assert w.bound(*low, *b)
    urgent = gang_at(w, "urgent", 2, "team-a", 1000, "4")
    decision = w.filter(urgent[0])
    assert evicted(decision) == set(low), decision.reason
    return w, urgent, b


def test_the_room_held_for_a_preemptor_counts_toward_its_queue() -> None:
    w, urgent, b = preempting_world()
    delete(w, ["low-0", "low-1"])
    assert gpus_in_use(w, "team-a") == 8, "the 8 gpus held for urgent are team-a's"
    # team-b's gang finishes: 16 gpus free. team-a's next gang of 16 would take team-a to 24 with
    # urgent planned into its held room: it waits
    delete(w, b)
    more = gang_at(w, "more", 4, "team-a", 100, "4")
    decision = w.filter(more[0])
    assert decision.verdict is Verdict.WAITING
    assert decision.reason == "gang default/more: queue team-a: gpu limit 16, in use 8, gang needs 16"
    w.schedule(*urgent)
    assert w.bound(*urgent)
    assert gpus_in_use(w, "team-a") == 8


def test_a_preemptor_is_admitted_again_when_it_is_planned_into_its_held_room() -> None:
    w, urgent, _ = preempting_world()
    delete(w, ["low-0", "low-1"])
    # the queue's limit is lowered while the room is held: planning into it would pass the new limit
    w.cluster.apply(kai_queue("team-a", gpu={"quota": 4, "limit": 4}))
    decision = w.filter(urgent[0])
    assert decision.verdict is Verdict.WAITING
    assert decision.reason == "gang default/urgent: queue team-a: gpu limit 4, in use 0, gang needs 8"
    assert w.scheduler.ledger.entry("default/urgent").plan == {}
    assert w.scheduler.ledger.preemption("default/urgent") is None, "the room it cannot use is given back"
    assert gpus_in_use(w, "team-a") == 0


# ----------------------------------------------------------------- 7. in-queue preemption credits its victims
@pytest.mark.parametrize("nodes", [2, 4], ids=["cluster-full", "room-to-spare"])
def test_a_gang_its_queue_limit_holds_preempts_its_own_queues_lower_priority_gang(nodes: int) -> None:
    # team-a (limit 16) runs `low` (16 gpus, priority 100). `urgent` (8 gpus, priority 1000) would take
    # team-a to 24 with `low` counted; evicting `low` leaves 8: it preempts, whether the cluster is full
    # or has room to spare
    w = World(
        [
            *gpu_nodes(nodes),
            kai_queue("team-a", gpu={"quota": 16, "limit": 16}),
            kai_queue("team-b", gpu={"quota": 16, "limit": -1}),
        ]
    )
    low = gang_at(w, "low", 4, "team-a", 100, "4")
    w.schedule(*low)
    assert w.bound(*low)
    urgent = gang_at(w, "urgent", 2, "team-a", 1000, "4")
    decision = w.filter(urgent[0])
    assert decision.verdict is Verdict.WAITING
    assert evicted(decision) == set(low), decision.reason
    delete(w, low)
    w.schedule(*urgent)
    assert w.bound(*urgent)
    assert gpus_in_use(w, "team-a") == 8


def test_a_limit_no_eviction_in_the_queue_can_meet_evicts_no_one() -> None:
    # `low` is of priority 2000: urgent may not evict it, and team-b's gang is another queue's
    w = World(
        [
            *gpu_nodes(4),
            kai_queue("team-a", gpu={"quota": 16, "limit": 16}),
            kai_queue("team-b", gpu={"quota": 16, "limit": -1}),
        ]
    )
    high = gang_at(w, "high", 4, "team-a", 2000, "4")
    other = gang_at(w, "other", 2, "team-b", 10, "4")
    w.schedule(*high, *other)
    urgent = gang_at(w, "urgent", 2, "team-a", 1000, "4")
    decision = w.filter(urgent[0])
    assert decision.verdict is Verdict.WAITING and not evicted(decision)
    assert decision.reason == "gang default/urgent: queue team-a: gpu limit 16, in use 16, gang needs 8"


# ----------------------------------------------------------------- 9. the preempt verb's queue rules
def test_the_preempt_verb_keeps_queue_rules_for_a_plain_preemptor() -> None:
    # node-0 runs a plain pod of team-b, at its quota (no reclaim may take it); node-1 a plain pod of
    # the preemptor's own queue, team-a: only node-1 is kept
    w = World(
        [
            *gpu_nodes(3),
            kai_queue("team-a", gpu={"quota": 8, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 8, "limit": -1}),
            make_pod("theirs", gpu="8", node="node-0", labels={QUEUE: "team-b"}, uid="u-theirs"),
            make_pod("ours", gpu="8", node="node-1", labels={QUEUE: "team-a"}, uid="u-ours"),
        ]
    )
    preemptor = make_pod("urgent", gpu="8", labels={QUEUE: "team-a"}, uid="u-urgent")
    preemptor["spec"]["priority"] = 1000
    w.cluster.apply(preemptor)
    victims: dict[str, Any] = {
        "node-0": {"Pods": [{"UID": "u-theirs"}], "NumPDBViolations": 0},
        "node-1": {"Pods": [{"UID": "u-ours"}], "NumPDBViolations": 0},
    }
    decision = w.scheduler.preempt(w.pod("urgent"), victims)
    assert set(decision.victims) == {"node-1"}, decision.summary()
    judged = decision.candidates["node-0"]
    assert judged.outcome is Outcome.VETOED_QUEUE
    assert "team-b" in judged.why
    # kept where the other queue is over its fair share (team-b's is 8 of 24: it runs 8 + 8) and stays
    # at its quota once the victim goes
    w.cluster.apply(make_pod("theirs-2", gpu="8", node="node-2", labels={QUEUE: "team-b"}, uid="u-t2"))
    w.cluster.apply(kai_queue("team-b", gpu={"quota": 0, "limit": -1}))
    w.cluster.apply(kai_queue("team-a", gpu={"quota": 16, "limit": -1}))
    decision = w.scheduler.preempt(w.pod("urgent"), victims)
    assert set(decision.victims) == {"node-0", "node-1"}, decision.summary()


def test_the_preempt_verb_credits_own_queue_victims_against_the_preemptors_limit() -> None:
    # team-a (limit 8) runs 8 gpus: the preemptor's 8 pass the limit only once its own queue's victim
    # goes; a victim of another queue frees no room under team-a's limit
    w = World(
        [
            *gpu_nodes(2),
            kai_queue("team-a", gpu={"quota": 8, "limit": 8}),
            kai_queue("team-b", gpu={"quota": 0, "limit": -1}),
            make_pod("ours", gpu="8", node="node-1", labels={QUEUE: "team-a"}, uid="u-ours"),
            make_pod("theirs", gpu="8", node="node-0", labels={QUEUE: "team-b"}, uid="u-theirs"),
        ]
    )
    preemptor = make_pod("urgent", gpu="8", labels={QUEUE: "team-a"}, uid="u-urgent")
    preemptor["spec"]["priority"] = 1000
    w.cluster.apply(preemptor)
    victims: dict[str, Any] = {
        "node-0": {"Pods": [{"UID": "u-theirs"}], "NumPDBViolations": 0},
        "node-1": {"Pods": [{"UID": "u-ours"}], "NumPDBViolations": 0},
    }
    decision = w.scheduler.preempt(w.pod("urgent"), victims)
    assert set(decision.victims) == {"node-1"}, decision.summary()
    assert "gpu limit 8" in decision.candidates["node-0"].why


def test_while_a_gang_preempts_in_its_queue_the_queues_lower_priority_work_waits_for_it() -> None:
    # team-a (limit 20) runs four plain pods of 4 gpus (16). `urgent` (2 x 4, priority 1000) needs 8:
    # the 4 to spare and one pod evicted. While that victim terminates, a priority-0 pod of team-a (its
    # replacement, say) would take the 4 to spare; the victim gone, urgent would be 4 short again and
    # evict another, for ever. The queue's room is urgent's until it is placed
    w = World([*gpu_nodes(3), kai_queue("team-a", gpu={"quota": 0, "limit": 20})])
    for i in range(4):
        w.cluster.apply(make_pod(f"p{i}", gpu="4", node=f"node-{i % 2}", labels={QUEUE: "team-a"}))
    urgent = gang_at(w, "urgent", 2, "team-a", 1000, "4")
    decision = w.filter(urgent[0])
    (victim,) = evicted(decision)
    pod = w.pod(victim)
    w.cluster.apply({**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    w.cluster.apply(make_pod("refill", gpu="4", labels={QUEUE: "team-a"}))
    refused = w.filter("refill")
    assert refused.verdict is Verdict.WAITING
    # the room urgent claims on node-2 is charged to team-a: the queue is at its limit with it
    assert "queue team-a: gpu limit 20, in use 20, pod needs 4" in refused.reason, refused.reason
    delete(w, [victim])
    w.schedule(*urgent)
    assert w.bound(*urgent)
    assert gpus_in_use(w, "team-a") == 20
    assert w.filter("refill").verdict is not Verdict.PASS  # the queue is at its limit now


def test_the_free_room_a_preemption_claims_is_charged_to_its_queue_so_a_sibling_cannot_spend_it() -> None:
    """urgent (team-a) evicts low and counts on node-2, free already, which it claims. Uncharged, that
    claim left dept's limit to team-c, whose gang was admitted while low terminated; urgent was then
    refused by dept's limit, its preemption ended, and low had gone for nothing."""
    w = World(
        [
            *gpu_nodes(6),
            kai_queue("dept", gpu={"quota": 24, "limit": 24}),
            kai_queue("team-a", "dept", gpu={"quota": 12, "limit": -1}),
            kai_queue("team-c", "dept", gpu={"quota": 12, "limit": -1}),
            kai_queue("team-b", gpu={"quota": 48, "limit": -1}),
        ]
    )
    low = gang_at(w, "low", 2, "team-a", 100, "4")
    w.schedule(*low)
    w.schedule(*gang_at(w, "b", 2, "team-b", 2000, "4"))
    for i in range(3):  # team-b half fills node-3..5 (another queue, higher priority: never a victim)
        pod = make_pod(f"half-{i}", gpu="4", cpu="100m", memory="64Mi", labels={QUEUE: "team-b"})
        pod["spec"].update(priority=2000, nodeName=f"node-{i + 3}")
        pod["status"] = {"phase": "Running"}
        w.cluster.apply(pod)
    urgent = gang_at(w, "urgent", 2, "team-a", 1000, "8")
    assert evicted(w.filter(urgent[0])) == set(low)
    assert w.scheduler.ledger.preemption("default/urgent").claimed  # node-2, free already
    more = gang_at(w, "more", 3, "team-c", 100, "4")
    told = w.schedule(*more)
    assert not w.bound(*more)
    assert "queue dept: gpu limit 24" in told[more[0]].reason, told[more[0]].reason
    delete(w, low)
    assert w.filter(urgent[0]).verdict is Verdict.PASS, "low was evicted for nothing"


def test_while_a_gang_preempts_for_victims_room_alone_the_queues_lower_priority_work_waits_for_it() -> None:
    # as above, but node-2 is full of another queue's higher-priority work: urgent's room is all its
    # victims' (no free room claimed, nothing charged yet), and team-a is within its limit with a refill
    w = World(
        [
            *gpu_nodes(3),
            kai_queue("team-a", gpu={"quota": 0, "limit": 20}),
            kai_queue("team-b", gpu={"quota": 8}),
        ]
    )
    for i in range(4):
        w.cluster.apply(make_pod(f"p{i}", gpu="4", node=f"node-{i % 2}", labels={QUEUE: "team-a"}))
    other = make_pod("other", gpu="8", node="node-2", labels={QUEUE: "team-b"})
    other["spec"]["priority"] = 5000
    w.cluster.apply(other)
    urgent = gang_at(w, "urgent", 2, "team-a", 1000, "4")
    victims = evicted(w.filter(urgent[0]))
    assert len(victims) == 2 and not w.scheduler.ledger.preemption("default/urgent").claimed
    for name in victims:
        pod = w.pod(name)
        w.cluster.apply({**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    w.cluster.apply(make_pod("refill", gpu="4", labels={QUEUE: "team-a"}))
    refused = w.filter("refill")
    assert refused.verdict is Verdict.WAITING
    assert (
        "queue team-a is freeing room for gang default/urgent (priority 1000) by preemption" in refused.reason
    )
