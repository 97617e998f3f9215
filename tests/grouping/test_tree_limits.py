"""A gang's subgroup tree is bounded: a tree deeper or larger than the stated limits is refused with
a reason naming the field and the limit, before anything proportional to it is built, and nothing
that walks a tree recurses (a deep tree that got past the limits still costs no stack)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.grouping import GroupingError, ListLookup, derive_membership, groups_for_workload, kai
from extender.model import labels as keys
from extender.model.group import (
    MAX_SUBGROUP_DEPTH,
    MAX_SUBGROUPS,
    GroupSpec,
    MembershipState,
    Source,
    SubGroup,
)
from extender.model.keys import group_key
from extender.scheduling import queues
from tests.builders import gang_pod, make_kai_podgroup


def chain(depth: int, leaf_min: int = 1) -> list[dict[str, Any]]:
    """KAI subGroups sg0 <- sg1 <- ... <- sg{depth-1}: one leaf at the bottom of a chain."""
    out: list[dict[str, Any]] = []
    for i in range(depth):
        sg: dict[str, Any] = {"name": f"sg{i}"}
        if i:
            sg["parent"] = f"sg{i - 1}"
        if i == depth - 1:
            sg["minMember"] = leaf_min
        else:
            sg["minSubGroup"] = 1
        out.append(sg)
    return out


def flat(n: int) -> list[dict[str, Any]]:
    return [{"name": f"leaf{i}", "minMember": 1} for i in range(n)]


def member_of(subgroups: list[dict[str, Any]], leaf: str):
    pg = make_kai_podgroup("deep", subgroups=subgroups)
    pod = gang_pod("p", "deep", labels={keys.SUBGROUP_NAME: leaf})
    return derive_membership(pod, ListLookup([pg]))


@pytest.mark.parametrize(
    ("subgroups", "leaf", "field", "words"),
    [
        (chain(1200), "sg1199", "spec.subGroups[", f"at most {MAX_SUBGROUP_DEPTH} levels"),
        (chain(MAX_SUBGROUP_DEPTH + 1), f"sg{MAX_SUBGROUP_DEPTH}", "spec.subGroups[", "levels"),
        (flat(MAX_SUBGROUPS + 1), "leaf0", "spec.subGroups", f"at most {MAX_SUBGROUPS}"),
    ],
    ids=["1200-deep", "one-level-too-deep", "one-subgroup-too-many"],
)
def test_a_podgroup_tree_past_the_limits_is_refused_with_the_limit(subgroups, leaf, field, words):
    m = member_of(subgroups, leaf)
    assert m.state is MembershipState.INVALID
    assert field in m.message and words in m.message, m.message


@pytest.mark.parametrize(
    ("subgroups", "leaf"),
    [(chain(MAX_SUBGROUP_DEPTH), f"sg{MAX_SUBGROUP_DEPTH - 1}"), (flat(MAX_SUBGROUPS), "leaf7")],
    ids=["deepest-allowed", "largest-allowed"],
)
def test_a_podgroup_tree_at_the_limits_is_a_gang(subgroups, leaf):
    m = member_of(subgroups, leaf)
    assert m.state is MembershipState.MEMBER and m.subgroup == leaf, m.message


def _spec(subgroups: list[SubGroup]) -> GroupSpec:
    return GroupSpec(key=group_key("default", "g"), source=Source.KAI_PODGROUP, subgroups=tuple(subgroups))


def test_walking_a_deep_tree_uses_no_stack():
    # built directly, past the limits grouping enforces: the walks must not depend on them
    depth = 5000
    subgroups = [
        SubGroup(f"s{i}", parent=f"s{i - 1}" if i else None, min_subgroup=1) for i in range(depth - 1)
    ]
    subgroups.append(SubGroup(f"s{depth - 1}", parent=f"s{depth - 2}", min_member=2))
    spec = _spec(subgroups)
    assert spec.ready_leaves({f"s{depth - 1}": 2}) == (f"s{depth - 1}",)
    assert spec.ready_leaves({f"s{depth - 1}": 1}) is None
    assert spec.quorum_upper_bound() == 2


def test_fair_shares_over_a_deep_queue_chain_use_no_stack():
    objects = [
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": f"q{i}"},
            "spec": {"parentQueue": f"q{i - 1}"} if i else {},
        }
        for i in range(1200)
    ]
    tree = queues.read_tree(objects)  # cut every MAX_QUEUE_DEPTH levels: 75 chains of 16
    gpu = "nvidia.com/gpu"
    requested = {f"q{i}": {gpu: 8} for i in range(1200)}
    shares = queues.fair_shares(tree, requested, {gpu: 8 * 75})
    assert len(shares) == 1200
    assert shares["q1199"][gpu] == 8 and shares["q0"][gpu] == 8


class _Counted(SubGroup):
    """SubGroup that counts its constructions, and stops a run that expands past any sane bound."""

    made = 0

    def __init__(self, *args: Any, **kw: Any) -> None:
        type(self).made += 1
        if type(self).made > 2 * MAX_SUBGROUPS:
            raise AssertionError("expanded a subgroup per replica past the limit")
        super().__init__(*args, **kw)


def big_jobset(replicas: int, *, suspend: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "huge", "namespace": "ml", "uid": "huge-uid", "resourceVersion": "1"},
        "spec": {
            "suspend": suspend,
            "replicatedJobs": [
                {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
                {"name": "workers", "replicas": replicas, "template": {"spec": {"parallelism": 1}}},
            ],
        },
    }


def test_a_jobset_with_a_million_replicas_is_refused_before_its_tree_is_built(monkeypatch):
    _Counted.made = 0
    monkeypatch.setattr(kai, "SubGroup", _Counted)
    with pytest.raises(GroupingError) as err:
        groups_for_workload(big_jobset(1_500_000), ListLookup([]))
    assert err.value.field == "spec.replicatedJobs[1].replicas"
    assert f"at most {MAX_SUBGROUPS}" in err.value.message and "1500003 subgroups" in err.value.message
    assert _Counted.made == 0  # refused from the counts, not by building


def test_a_jobset_at_the_subgroup_limit_is_a_gang():
    # one subgroup per replicatedJob and one per Job replica: 2 + 1 + replicas
    (group,) = groups_for_workload(big_jobset(MAX_SUBGROUPS - 3, suspend=False), ListLookup([]))
    assert len(group.subgroups) == MAX_SUBGROUPS
    with pytest.raises(GroupingError):
        groups_for_workload(big_jobset(MAX_SUBGROUPS - 2, suspend=False), ListLookup([]))
