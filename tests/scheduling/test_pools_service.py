"""Size-class pools in the live filter path (scheduling.pooling): a small gang keeps off a rack a
large gang runs in and opens an empty one; one that fits only there waits, says why, evicts nobody,
holds in its own pool and starts there once it drains; pools off, it takes the large rack's room; a
restarted service reads the same classes off the cluster.

Racks of 4 nodes of 8 cpu (32 cpu a rack): a gang asking 16 cpu or more is large.
"""

from __future__ import annotations

import numpy as np
import pytest

from extender.placement import api as placement
from extender.placement import backfill
from extender.scheduling import pooling
from extender.scheduling.decisions import Verdict
from extender.scheduling.holds import Held, HoldSettings
from tests.scheduling.test_holds import HoldWorld
from tests.scheduling.test_queues import World


def large_in_one_rack(w: HoldWorld) -> tuple[list[str], str]:
    """A large gang (3 whole nodes) bound in one rack: 8 cpu left there, the other rack empty."""
    big = w.rack_gang("big", 3, "8", prio=100)
    w.schedule(*big)
    assert w.bound(*big)
    return big, w.rack_of(big[0])


def large_in_each_rack(w: HoldWorld) -> tuple[list[str], list[str]]:
    """Two large gangs (3 whole nodes each) bound in different racks: one free node left in each."""
    left = w.rack_gang("l1", 3, "8", prio=100)
    w.schedule(*left)
    right = w.rack_gang("l2", 3, "8", prio=100)
    w.schedule(*right)
    assert w.bound(*left, *right) and w.rack_of(left[0]) != w.rack_of(right[0])
    return left, right


@pytest.mark.parametrize(
    ("holds", "into_large_rack"),
    [
        (HoldSettings(), False),  # pools: the small gang opens the empty rack
        (HoldSettings(pools=False), True),  # tightest fit: the large rack's last node
        (HoldSettings(enabled=False), True),  # pools need holds (they bound the wait)
    ],
)
def test_a_small_gang_keeps_off_the_rack_a_large_gang_runs_in(
    holds: HoldSettings, into_large_rack: bool
) -> None:
    w = HoldWorld([], holds=holds)
    _big, large_rack = large_in_one_rack(w)
    small = w.rack_gang("s", 2, "4")  # 8 cpu: exactly the large rack's free node
    w.schedule(*small)
    assert w.bound(*small)
    assert (w.rack_of(small[0]) == large_rack) is into_large_rack
    pooled = holds.enabled and holds.pools
    for gang, size in (("default/big", "large"), ("default/s", "small")):  # /debug says the class
        described = w.scheduler.debug.describe(gang)
        assert described is not None
        want = {"level": "topology.kubernetes.io/rack", "class": size} if pooled else None
        assert described["pool"] == want


def test_small_gangs_pack_together_and_one_that_fits_only_in_the_large_rack_waits_for_its_own() -> None:
    w = HoldWorld([])
    _big, large_rack = large_in_one_rack(w)
    smalls = []
    for i in range(4):  # 8 cpu each: they fill the other rack, packed there, never beside the large gang
        gang = w.rack_gang(f"s{i}", 2, "4")
        w.schedule(*gang)
        assert w.bound(*gang) and w.rack_of(gang[0]) != large_rack
        smalls.append(gang)
    late = w.rack_gang("late", 2, "4")
    decision = w.filter(late[0])
    assert decision.verdict is Verdict.NO_FIT
    assert decision.reason.startswith(
        f"gang default/late (2 pods, small for a rack) waits for room in the racks of small gangs: it "
        f"would fit only in rack {large_rack}, kept for large gangs (size-class pools)"
    ), decision.reason
    assert not w.scheduler.ledger.preemptions_now()  # a pool's wait evicts nobody
    w.tick()
    hold = w.hold("late")
    assert hold is not None and hold["domain"] != f"rack {large_rack}"  # held in its own pool
    assert hold["drainedNodes"] == 0
    # a small gang of its pool ends: the hold is ready, the gang is nudged and starts there
    w.delete(*smalls[0])
    effects = w.tick()
    assert {e.name for e in effects if e.kind == "nudge"} >= {late[0]}
    w.schedule(*late)
    assert w.bound(*late) and w.rack_of(late[0]) != large_rack


def test_a_restarted_service_reads_the_classes_off_the_cluster() -> None:
    w = HoldWorld([])
    _big, large_rack = large_in_one_rack(w)
    # a new process over the same objects: nothing remembered, the large rack is large still
    small = [f"s-{i}" for i in range(2)]
    w.rack_gang("s", 2, "4")
    again = World(w.cluster.all_objects())
    again.schedule(*small)
    assert again.bound(*small)
    node = again.pod(small[0])["spec"]["nodeName"]
    assert w.node_rack(node) != large_rack


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pool_reserve": -1.0}, "pool reserve"),
        ({"pool_reserve": float("nan")}, "pool reserve"),
        ({"large_share": 0.0}, "large share"),
    ],
)
def test_bad_pool_settings_are_refused_with_why(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HoldSettings(**kwargs)  # type: ignore[arg-type]


def test_a_small_gang_its_pool_keeps_waiting_does_not_wait_behind_a_large_gangs_hold() -> None:
    """Every rack hosts a large gang; a whole-rack gang holds one of them. A small gang that fits only
    beside a large gang is the head of its own class: it holds where it fits now and starts there."""
    w = HoldWorld([])
    large_in_each_rack(w)
    big = w.rack_gang("big", 4, "8")
    assert w.filter(big[0]).verdict is Verdict.NO_FIT
    w.tick()
    held = w.hold("big")["domain"].split()[-1]
    small = w.rack_gang("s", 2, "4")
    assert w.filter(small[0]).verdict is Verdict.NO_FIT  # outside its pool: no small rack exists
    effects = w.tick()
    assert w.hold("s") is not None and w.hold("s")["rank"] == 2  # the small class's head
    assert {e.name for e in effects if e.kind == "nudge"} >= {small[0]}  # ready at once
    w.schedule(*small)
    assert w.bound(*small) and w.rack_of(small[0]) != held


def test_a_hold_on_an_empty_rack_is_not_taken_for_a_pod_in_it() -> None:
    """Inside a plan's view the holds are taken out of free: the classes are read with them given back,
    so an empty rack held for a gang stays empty (no class), not a rack of small gangs."""
    w = HoldWorld([])
    small = w.rack_gang("s", 2, "4")
    w.schedule(*small)
    used = w.rack_of(small[0])
    store, book = w.store, w.scheduler.ledger.holds
    level = store.arrays.level("topology.kubernetes.io/rack")
    empty_rows = np.array(
        sorted(r for r, name in store.row_names.items() if w.node_rack(name) != used), dtype=np.int32
    )
    amounts = np.zeros((len(empty_rows), store.arrays.n_res), dtype=np.int64)
    amounts[:, 0] = 8000  # a whole node's cpu on each
    plan = placement.Plan(placement.Outcome.PLACED, (empty_rows,), {}, None)
    hold = backfill.Hold("default/big", empty_rows, amounts, plan)
    names = tuple(store.row_names[int(r)] for r in empty_rows)
    book.replace([Held("default/big", hold, names, None, {}, 0, 0.0, "")], {})
    pools = w.scheduler.pools
    outside = pools.classes(level)
    with book.withheld(store.arrays, for_gang=None) as seen:
        assert (seen.free[empty_rows, 0] == 0).all()  # the view: the hold taken out
        store.change_gen += 1  # read again inside the block
        inside = pools.classes(level)
    assert outside == inside and len(inside) == 1  # only the small gang's rack is in use


def test_classes_follow_a_derivation_the_interval_put_off() -> None:
    """The large rows are derived at most once per interval: a read between sees the old ones, and
    the first read after it sees the new ones, though the store has not changed since."""
    w = HoldWorld([])
    big, large_rack = large_in_one_rack(w)
    pools = w.scheduler.pools
    level = w.store.arrays.level("topology.kubernetes.io/rack")
    rack_id = next(d for d, c in pools.classes(level).items() if c.value == "large")
    assert w.store.arrays.domain_name(level, rack_id) == large_rack
    w.delete(*big)
    assert pools.classes(level).get(rack_id) is not None  # put off: the rows read last still say large
    w.scheduler.ledger.clock.now += pooling.DERIVE_INTERVAL_S
    assert rack_id not in pools.classes(level)  # derived again: the rack is empty


def test_a_small_gang_kube_scheduler_refused_nodes_holds_where_it_fits_now_and_starts_there() -> None:
    """Every rack hosts a large gang, one free node left in each: a small gang fits there, outside its
    pool. kube-scheduler refused its members those nodes before (a refusal is a hint the filter drops
    when it stands in the way): its hold is chosen with the refusals dropped too, where it fits now, so
    it is ready at once and the gang starts, never held on rows the large gangs keep busy."""
    w = HoldWorld([])
    left, right = large_in_each_rack(w)
    busy = {w.pod(n)["spec"]["nodeName"] for n in (*left, *right)}
    free = sorted(set(w.store.node_rows) - busy)
    assert len(free) == 2  # one whole node in each rack
    small = w.rack_gang("s", 2, "4")  # 8 cpu: a quarter rack, small
    assert w.filter(small[0]).verdict is Verdict.NO_FIT  # outside its pool: no small rack exists
    ledger = w.scheduler.ledger
    for name in small:
        for node in free:
            ledger.exclude_and_discard("default/s", f"default/{name}", node, "not offered")
    # refusals aside it fits only outside its pool: it is told it waits for its pool, not that it
    # fits nowhere, and nothing is preempted for it; the refusals stay for its plan to come
    # kube-scheduler's own fit offers the free nodes only: a look the no-fit remembered from the first
    # one does not answer (offered every node again, that memory would say the same, right or wrong)
    told = w.scheduler.filter(w.pod(small[0]), free)
    assert told.verdict is Verdict.NO_FIT and "waits for room in the racks of small gangs" in told.reason
    assert ledger.preemption("default/s") is None and ledger.excluded("default/s")
    effects = w.tick()
    hold = w.hold("s")
    assert hold is not None and set(hold["nodes"]) <= set(free), hold
    assert hold["drainedNodes"] == hold["heldNodes"]  # where it fits now: ready at once
    assert {e.name for e in effects if e.kind == "nudge"} >= {small[0]}
    w.schedule(*small)
    assert w.bound(*small)
    assert {w.pod(n)["spec"]["nodeName"] for n in small} <= set(free)


def test_a_gang_its_pool_kept_waiting_starts_once_its_pool_takes_the_rack_no_release_needed() -> None:
    """A large gang waits for the only rack it fits in, kept for small gangs; then a large gang's pod
    lands in that rack (bound by another binder: no pod ends, no hold moves), which makes it a large
    rack once the rows are read again. The waiting gang's filter starts it there: the answer a filter
    keeps while nothing it read changed keys on the pools too (interleavings kill seed 393: the kept
    answer said "kept for small gangs" for good, while the holding pass found it fits now and held
    nothing for it)."""
    w = HoldWorld([])
    _big, large_rack = large_in_one_rack(w)  # one 8-cpu node left there
    small = w.rack_gang("s", 2, "4")
    w.schedule(*small)
    assert w.bound(*small) and w.rack_of(small[0]) != large_rack
    other_rack = w.rack_of(small[0])
    late = w.rack_gang("late", 2, "8")  # large (16 cpu): fits only in the small gang's rack
    w.rack_gang("x", 3, "8")
    first = w.filter(late[0])
    assert first.verdict is Verdict.NO_FIT and "kept for small gangs" in first.reason, first.reason
    # a large gang's member bound into that rack by someone else: nothing released, no hold moved
    busy = {w.pod(n)["spec"]["nodeName"] for n in small}
    node = next(n for n in sorted(w.store.node_rows) if w.node_rack(n) == other_rack and n not in busy)
    w.cluster.apply({**w.pod("x-0"), "spec": {**w.pod("x-0")["spec"], "nodeName": node}})
    w.scheduler.ledger.clock.now += pooling.DERIVE_INTERVAL_S
    decisions = w.schedule(*late)
    assert w.bound(*late), {n: (d.verdict, d.reason) for n, d in decisions.items()}
    assert {w.rack_of(n) for n in late} == {other_rack}
