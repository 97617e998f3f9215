"""A member placed on its own (an elastic extra, once its gang's quorum is bound) follows the domain
of the members placed under the same constraint: its subgroup's own rack, the gang's rack or block
for any member. A sibling subgroup's rack is not its."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from extender.scheduling import planning
from extender.scheduling.ledger import GangLedger
from extender.sim.cluster import topology
from extender.state.store import ClusterStore
from tests.builders import gang_pod, make_kai_podgroup, rack_cluster

RACK = {"topology": "dc", "requiredTopologyLevel": "rack"}
BLOCK = {"topology": "dc", "requiredTopologyLevel": "block"}
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"

# (the gang's constraint, each subgroup's, where a0 and b0 are bound, the extra pod's subgroup,
#  the nodes allowed for it)
CASES = [
    # each subgroup its own rack, the gang none: the extra b pod goes where b is, not where a is
    (None, RACK, ("n000", "n010"), "b", ["n010", "n011"]),
    (None, RACK, ("n000", "n010"), "a", ["n000", "n001"]),
    # the gang one block, each subgroup a rack: b's rack (in the gang's block)
    (BLOCK, RACK, ("n000", "n010"), "b", ["n010", "n011"]),
    # a rack for the whole gang: one rack, whichever subgroup placed first
    (RACK, None, ("n000", "n001"), "b", ["n000", "n001"]),
    # nothing placed in b yet: any rack for b (its first member chooses), any node with the label
    (None, RACK, ("n000", None), "b", ["n000", "n001", "n010", "n011", "n100", "n101", "n110", "n111"]),
]


@pytest.mark.parametrize(("gang", "sub", "bound", "leaf", "allowed"), CASES)
def test_a_member_placed_alone_follows_the_members_under_its_constraints(gang, sub, bound, leaf, allowed):
    store = ClusterStore()
    for obj in [*rack_cluster(racks=2, nodes_per_rack=2, blocks=2), topology("dc")]:
        store.upsert(obj)
    subgroups = [{"name": s, "minMember": 1, **({"topologyConstraint": sub} if sub else {})} for s in "ab"]
    store.upsert(make_kai_podgroup("g", subgroups=subgroups, topology=gang))
    for s, node in zip("ab", bound, strict=True):
        if node is not None:
            store.upsert(gang_pod(f"g-{s}0", "g", labels={SUBGROUP_LABEL: s}, node=node))
    extra = gang_pod(f"g-{leaf}1", "g", labels={SUBGROUP_LABEL: leaf})
    store.upsert(extra)
    ledger = GangLedger(store, wait_s=5, hold_s=5, backoff_initial_s=2, backoff_max_s=60, clock=lambda: 0.0)
    m = store.membership_of(extra)
    assert m.subgroup == leaf and m.group is not None
    rows = np.array(sorted(store.node_rows.values()), dtype=np.int32)
    mask = planning.domain_mask(
        store, ledger, m.group, leaf, rows, exclude=store.pods[f"default/g-{leaf}1"].key
    )
    assert mask is not None
    assert sorted(store.row_names[int(r)] for r in rows[mask]) == allowed


def test_a_plan_over_a_view_survives_a_level_its_subgroups_name_first():
    """The cluster with holds taken out, or a preemptor's trial, is a view of the store's arrays made
    before the plan; a subgroup's rack, named by no gang before, registers the level during the plan
    (the gang itself has no constraint). The plan reads the store's labels, not the view's stale
    ones (it raised ClusterArrays.domains: shape (0, n), expected (1, n))."""
    store = ClusterStore()
    for obj in [*rack_cluster(racks=2, nodes_per_rack=2), topology("dc")]:
        store.upsert(obj)
    subgroups = [{"name": s, "minMember": 1, "topologyConstraint": RACK} for s in "ab"]
    store.upsert(make_kai_podgroup("g", subgroups=subgroups))
    for s in "ab":
        store.upsert(gang_pod(f"g-{s}0", "g", labels={SUBGROUP_LABEL: s}, cpu="6"))
    ledger = GangLedger(store, wait_s=5, hold_s=5, backoff_initial_s=2, backoff_max_s=60, clock=lambda: 0.0)
    view = copy.copy(store.arrays)
    levels = store.arrays.domains.shape[0]
    recs = [store.pods["default/g-a0"], store.pods["default/g-b0"]]
    members = [planning.Member(rec, store.membership(rec).subgroup) for rec in recs]
    group = store.membership(recs[0]).group
    rows = np.array(sorted(store.node_rows.values()), dtype=np.int32)
    plan = planning.plan_members(
        store, ledger, group, members, ("a", "b"), me=recs[0].key, offered_rows=rows, arrays=view
    )
    assert store.arrays.domains.shape[0] == levels + 1  # the rack level, registered by this plan
    assert plan is not None and not plan.reason
    assert sorted(plan.assignment) == ["default/g-a0", "default/g-b0"]


def test_a_member_placed_alone_resolves_only_its_own_chain_however_many_subgroups_are_placed(monkeypatch):
    """Each placed member pins what it sits under by its subgroup's ancestry alone: an extra member of
    one of many subgroups resolves its own constraints, not one per placed sibling (a JobSet of
    thousands of replica subgroups paid a topology resolve for each on every extra member's filter)."""
    store = ClusterStore()
    for obj in [*rack_cluster(racks=2, nodes_per_rack=2, blocks=2), topology("dc")]:
        store.upsert(obj)
    names = [f"s{i}" for i in range(40)]
    subgroups = [{"name": s, "minMember": 1, "topologyConstraint": RACK} for s in names]
    store.upsert(make_kai_podgroup("g", subgroups=subgroups, topology=BLOCK))
    for i, s in enumerate(names):
        store.upsert(gang_pod(f"g-{s}-0", "g", labels={SUBGROUP_LABEL: s}, node=f"n0{i % 2}{i % 2}"))
    extra = gang_pod("g-s39-1", "g", labels={SUBGROUP_LABEL: "s39"})
    store.upsert(extra)
    ledger = GangLedger(store, wait_s=5, hold_s=5, backoff_initial_s=2, backoff_max_s=60, clock=lambda: 0.0)
    m = store.membership_of(extra)
    rows = np.array(sorted(store.node_rows.values()), dtype=np.int32)
    resolves = []
    real = planning.topology.resolve
    monkeypatch.setattr(planning.topology, "resolve", lambda *a: resolves.append(a) or real(*a))
    mask = planning.domain_mask(
        store, ledger, m.group, "s39", rows, exclude=store.pods["default/g-s39-1"].key
    )
    assert len(resolves) == 2  # s39's rack and the gang's block: its chain, nothing of s0..s38
    # s39's own member is on n011 (39 is odd): its rack, r01 (n010, n011), inside the gang's block
    assert sorted(store.row_names[int(r)] for r in rows[mask]) == ["n010", "n011"]
