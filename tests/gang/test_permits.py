"""The gang-permit cache: plans, the barrier, expiry and backoff, on a fake clock."""

import pytest

from extender.gang.permits import Arrival, GangPermits, Phase
from extender.model.keys import GroupKey, PodKey


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def permits(clock):
    return GangPermits(wait_s=5.0, backoff_initial_s=2.0, backoff_max_s=10.0, clock=clock)


G = GroupKey("ml/train")
A, B, C = PodKey("ml/a"), PodKey("ml/b"), PodKey("ml/c")


def test_barrier_releases_when_every_planned_member_arrives(permits):
    permits.set_plan(G, {A: "n1", B: "n2", C: "n2"}, domain="rack r1")
    assert permits.arrive(A, "n1")[0] is Arrival.WAIT
    assert permits.arrive(B, "n2")[0] is Arrival.WAIT
    outcome, entry = permits.arrive(C, "n2")
    assert outcome is Arrival.RELEASE
    assert entry.waiting() == [A, B, C]
    permits.mark_released(G, [A, B, C])
    assert permits.entry(G).phase is Phase.BOUND
    assert permits.planned_node(A) is None


def test_a_member_on_another_node_is_refused(permits):
    permits.set_plan(G, {A: "n1", B: "n2"}, domain="")
    assert permits.arrive(A, "n9")[0] is Arrival.WRONG_NODE


def test_a_pod_outside_the_plan_is_not_planned(permits):
    permits.set_plan(G, {A: "n1"}, domain="")
    assert permits.arrive(C, "n1")[0] is Arrival.NOT_PLANNED


def test_deadline_counts_from_the_first_arrival(permits, clock):
    permits.set_plan(G, {A: "n1", B: "n2"}, domain="")
    clock.now += 100  # a plan without arrivals never expires by itself
    assert permits.expired() == []
    permits.arrive(A, "n1")
    clock.now += 4.9
    assert permits.expired() == []
    clock.now += 0.2
    assert [e.key for e in permits.expired()] == [G]


def test_failure_releases_the_plan_and_backs_off_doubling(permits, clock):
    permits.set_plan(G, {A: "n1", B: "n2"}, domain="")
    permits.arrive(A, "n1")
    released = permits.fail(G, "quorum did not arrive")
    assert sorted(released) == [A, B]
    assert permits.planned_node(A) is None
    assert permits.in_backoff(G) == pytest.approx(2.0)
    clock.now += 2.0
    assert permits.in_backoff(G) == 0.0
    assert permits.entry(G).phase is Phase.PENDING
    permits.set_plan(G, {A: "n1"}, domain="")
    permits.fail(G, "again")
    assert permits.in_backoff(G) == pytest.approx(4.0)
    for _ in range(5):
        permits.fail(G, "again")
    assert permits.in_backoff(G) == pytest.approx(10.0)  # capped at backoff_max_s


def test_depart_takes_a_waiting_member_off_the_barrier(permits):
    permits.set_plan(G, {A: "n1", B: "n2"}, domain="")
    permits.arrive(A, "n1")
    permits.depart(A)
    assert permits.arrive(B, "n2")[0] is Arrival.WAIT


def test_a_new_plan_replaces_the_old_one(permits):
    permits.set_plan(G, {A: "n1", B: "n2"}, domain="")
    permits.set_plan(G, {A: "n3", C: "n4"}, domain="")
    assert permits.planned_node(B) is None
    assert permits.planned_node(A) == "n3"


def test_a_completed_barrier_does_not_expire_while_its_binds_are_in_flight(permits, clock):
    permits.set_plan(G, {A: "n1", B: "n2"}, domain="")
    permits.arrive(A, "n1")
    clock.now += 4.99
    assert permits.arrive(B, "n2")[0] is Arrival.RELEASE
    clock.now += 1.0
    assert permits.expired() == []
    assert permits.arrive(B, "n2")[0] is Arrival.WAIT  # a repeated call does not release twice


def test_members_the_api_refused_leave_the_spent_plan(permits):
    permits.set_plan(G, {A: "n1", B: "n2"}, domain="")
    permits.arrive(A, "n1")
    permits.arrive(B, "n2")
    permits.mark_released(G, [A], failed=[B])
    entry = permits.entry(G)
    assert entry.plan == {} and entry.arrived == set() and entry.phase is Phase.BOUND
    assert permits.planned_node(B) is None
