"""The KAI fair-share division and the Queue model: table-driven, plus properties of `divide`."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.model.queue import GPU, QueueError, QueueResource, parse_queue, read_queue
from extender.scheduling.queues import Claim, divide, fair_shares, read_tree


def queue(name: str, parent: str | None = None, priority: int | None = None, **resources: dict) -> dict:
    spec: dict = {"resources": resources}
    if parent:
        spec["parentQueue"] = parent
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    "capacity, claims, expected",
    [
        # quota first, the rest by weight
        (10, [Claim("a", 10, quota=2), Claim("b", 10, quota=2)], {"a": 5, "b": 5}),
        # 2 + 2 quota, 6 left as 3:1 = 4.5 and 1.5: the half unit to the first name
        (10, [Claim("a", 10, quota=2, weight=Fraction(3)), Claim("b", 10, quota=2)], {"a": 7, "b": 3}),
        # a queue gets no more than it requests; the rest goes to the others
        (10, [Claim("a", 1, quota=4), Claim("b", 20, quota=0)], {"a": 1, "b": 9}),
        # a limit caps the share, whatever the weight
        (10, [Claim("a", 10, limit=3, weight=Fraction(10)), Claim("b", 10)], {"a": 3, "b": 7}),
        # quota -1: everything it requests (within the capacity)
        (10, [Claim("a", 6, quota=None), Claim("b", 10, quota=2)], {"a": 6, "b": 4}),
        # zero weight: its quota only
        (10, [Claim("a", 10, quota=2, weight=Fraction(0)), Claim("b", 10)], {"a": 2, "b": 8}),
        # quotas beyond the capacity: scaled down in proportion
        (6, [Claim("a", 10, quota=6), Claim("b", 10, quota=3)], {"a": 4, "b": 2}),
        # rounding: 10 among three equal weights, the leftover unit to the first name
        (10, [Claim("c", 10), Claim("a", 10), Claim("b", 10)], {"a": 4, "b": 3, "c": 3}),
        # higher priority takes the over-quota capacity first
        (10, [Claim("lo", 10, priority=100), Claim("hi", 6, priority=200)], {"hi": 6, "lo": 4}),
        # nothing requested: nothing given
        (10, [Claim("a", 0, quota=5)], {"a": 0}),
        (0, [Claim("a", 5, quota=5)], {"a": 0}),
    ],
)
def test_divide(capacity: int, claims: list[Claim], expected: dict[str, int]) -> None:
    assert divide(capacity, claims) == expected


def test_a_hierarchy_divides_top_down_and_a_child_counts_toward_its_parent() -> None:
    tree = read_tree(
        [
            queue("org-a", gpu={"quota": 4, "limit": -1}),
            queue("org-b", gpu={"quota": 4, "limit": -1}),
            queue("a1", "org-a", gpu={"quota": 2, "limit": -1, "overQuotaWeight": 2}),
            queue("a2", "org-a", gpu={"quota": 2, "limit": -1, "overQuotaWeight": 1}),
        ]
    )
    requested = {"org-a": {GPU: 16}, "org-b": {GPU: 2}, "a1": {GPU: 8}, "a2": {GPU: 8}}
    shares = fair_shares(tree, requested, {GPU: 12})
    # org-b wants 2 of its quota 4: org-a gets the remaining 10; a1 and a2 split 10 - 4 = 6 as 2:1
    assert shares["org-b"][GPU] == 2
    assert shares["org-a"][GPU] == 10
    assert (shares["a1"][GPU], shares["a2"][GPU]) == (6, 4)
    assert tree.ancestors("a1") == ["a1", "org-a"]
    assert not tree.is_leaf("org-a") and tree.is_leaf("a1")


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"quota": 2, "limit": 4}, QueueResource(2, 4, Fraction(1))),
        ({"quota": -1, "limit": -1}, QueueResource(None, None, Fraction(1))),
        ({"quota": 2}, QueueResource(2, 2, Fraction(1))),  # limit unset: nothing above quota
        ({"quota": 2, "limit": 0, "overQuotaWeight": 0}, QueueResource(2, 2, Fraction(0))),
        ({"quota": -1, "limit": 0}, QueueResource(None, None, Fraction(1))),
        ({"quota": 1.5, "limit": 2.7}, QueueResource(1, 2, Fraction(1))),  # whole devices
    ],
)
def test_gpu_fields_read_as_kai_documents_them(raw: dict, expected: QueueResource) -> None:
    assert parse_queue(queue("q", gpu=raw)).resource(GPU) == expected


def test_units_and_a_resource_not_mentioned() -> None:
    q = parse_queue(queue("q", cpu={"quota": 2000, "limit": 4000}, memory={"quota": 4096, "limit": -1}))
    assert q.resource("cpu") == QueueResource(2000, 4000, Fraction(1))  # millicores, as ours
    assert q.resource("memory").quota == 4096 * 10**6  # megabytes -> bytes
    assert q.resource(GPU) == QueueResource(0, None, Fraction(1))  # not mentioned: not capped


@pytest.mark.parametrize(
    "obj, field",
    [
        (queue("q", gpu={"quota": "lots"}), "spec.resources.gpu.quota"),
        (queue("q", gpu={"quota": -2}), "spec.resources.gpu.quota"),
        (queue("q", gpu={"quota": 4, "limit": 2}), "spec.resources.gpu.limit"),
        (queue("q", gpu={"overQuotaWeight": -1}), "spec.resources.gpu.overQuotaWeight"),
        (queue("q", gpu=[1]), "spec.resources.gpu"),
        (queue("q", "q"), "spec.parentQueue"),
        ({"metadata": {}}, "metadata.name"),
        ({**queue("q"), "spec": {"priority": "high"}}, "spec.priority"),
    ],
)
def test_a_malformed_queue_is_a_clear_error(obj: dict, field: str) -> None:
    with pytest.raises(QueueError, match=field.replace(".", r"\.")):
        parse_queue(obj)


def test_malformed_queues_and_cycles_are_errors_of_the_tree_never_exceptions() -> None:
    tree = read_tree([queue("bad", gpu={"quota": "x"}), queue("x", "y"), queue("y", "x"), queue("ok")])
    assert "spec.resources.gpu.quota" in tree.errors["bad"]
    assert "cycle" in tree.errors["x"] and "cycle" in tree.errors["y"]
    assert set(tree.errors) == {"bad", "x", "y"}
    # kept, failing closed: what reads is kept (a limit of 0 = nothing above the unreadable quota, 0)
    assert tree.queues["bad"].resource(GPU) == QueueResource(0, 0, Fraction(1))
    assert tree.queues["x"].parent is None and tree.queues["y"].parent is None  # the cycle is cut


def test_a_malformed_queue_keeps_what_reads_and_closes_what_does_not() -> None:
    q, problems = read_queue(
        queue(
            "q", cpu={"quota": 4000, "limit": 2000}, gpu={"quota": 8, "limit": "lots"}, memory={"quota": 10}
        )
    )
    assert q.resource("cpu") == QueueResource(2000, 2000, Fraction(1))  # the tighter limit holds
    assert q.resource(GPU) == QueueResource(0, 0, Fraction(0))  # unreadable limit: nothing admitted
    assert q.resource("memory") == QueueResource(10 * 10**6, 10 * 10**6, Fraction(1))
    assert [p.split(":")[0] for p in problems] == ["spec.resources.cpu.limit", "spec.resources.gpu.limit"]
    for spec in ({"resources": [1]}, {"parentQueue": 3}, "nonsense"):
        closed, problems = read_queue({"metadata": {"name": "q"}, "spec": spec})
        assert problems and all(closed.resource(r).limit == 0 for r in ("cpu", "memory", GPU)), spec


claims = st.lists(
    st.builds(
        Claim,
        name=st.text("abcdef", min_size=1, max_size=3),
        request=st.integers(0, 1000),
        quota=st.one_of(st.none(), st.integers(0, 500)),
        limit=st.one_of(st.none(), st.integers(0, 800)),
        weight=st.fractions(0, 5),
        priority=st.sampled_from([100, 200]),
    ),
    max_size=6,
    unique_by=lambda c: c.name,
)


@given(capacity=st.integers(0, 3000), claims=claims)
def test_shares_never_exceed_capacity_limit_or_request(capacity: int, claims: list[Claim]) -> None:
    shares = divide(capacity, claims)
    assert sum(shares.values()) <= capacity
    for c in claims:
        assert 0 <= shares[c.name] <= c.request
        if c.limit is not None:
            assert shares[c.name] <= c.limit


@given(capacity=st.integers(0, 3000), claims=claims.filter(bool), extra=st.integers(1, 300))
def test_a_larger_quota_never_lowers_a_share(capacity: int, claims: list[Claim], extra: int) -> None:
    first = claims[0]
    if first.quota is None:
        return
    bigger = [dataclasses.replace(first, quota=first.quota + extra)]
    before = divide(capacity, claims)[first.name]
    after = divide(capacity, bigger + claims[1:])[first.name]
    assert after >= before - 1  # one unit of rounding


def _snapshot(quotas: list[int], allocs: list[tuple[int, int]], needs: list[tuple[int, int]], cap: int):
    from extender.model.group import GroupSpec, Policy, Source
    from extender.model.keys import GroupKey
    from extender.scheduling.queues import QueueSnapshot, _GroupTally

    names = [f"q{i}" for i in range(len(quotas))]
    tree = read_tree(
        [
            queue(n, cpu={"quota": q * 1000, "limit": -1}, gpu={"quota": q, "limit": -1})
            for n, q in zip(names, quotas, strict=True)
        ]
    )
    allocated = {n: {"cpu": c * 1000, "memory": 0, GPU: g} for n, (c, g) in zip(names, allocs, strict=True)}
    requested = {
        n: {r: allocated[n][r] + need for r, need in zip(("cpu", GPU), (c * 1000, g), strict=True)}
        for n, (c, g) in zip(names, needs, strict=True)
    }
    capacity = {"cpu": cap * 1000, "memory": 0, GPU: cap}
    groups = {}
    for n, (c, g) in zip(names, needs, strict=True):
        key = GroupKey(f"default/{n}-gang")
        spec = GroupSpec(key=key, source=Source.SINGLE_POD, policy=Policy.BASIC)
        groups[key] = _GroupTally(n, spec, {"cpu": c * 1000, "memory": 0, GPU: g}, {None: 1}, pending=1)
    used = {r: sum(a[r] for a in allocated.values()) for r in capacity}
    return QueueSnapshot(
        tree=tree,
        allocated=allocated,
        requested={n: {**requested[n], "memory": 0} for n in names},
        fair_share=fair_shares(tree, requested, capacity),
        capacity=capacity,
        free={r: max(0, capacity[r] - used[r]) for r in capacity},
        unknown={},
        groups=groups,
    )


@given(
    quotas=st.lists(st.integers(0, 8), min_size=2, max_size=4),
    data=st.data(),
    cap=st.integers(4, 40),
)
def test_a_gang_that_holds_another_is_itself_admitted(quotas: list[int], data, cap: int) -> None:
    """Holds never form a cycle: whoever a fair-share hold waits for may go."""
    from extender.scheduling.queues import admission

    pair = st.tuples(st.integers(0, 12), st.integers(0, 12))
    allocs = data.draw(st.lists(pair, min_size=len(quotas), max_size=len(quotas)))
    needs = data.draw(st.lists(pair, min_size=len(quotas), max_size=len(quotas)))
    snap = _snapshot(quotas, allocs, needs, cap)
    tallies = snap.groups
    for key, t in tallies.items():
        reason = admission(snap, t.queue, t.need, key)
        if reason is None or "fair share" not in reason:
            continue
        holder = reason.split(" while ")[1].split(" of queue ")[0]
        h = tallies[holder]
        assert admission(snap, h.queue, h.need, holder) is None, (reason, holder)
