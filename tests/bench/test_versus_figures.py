"""The figures `python -m bench versus` reports: what counts as whole, one rack, partial, and the latency."""

from __future__ import annotations

import pytest

from bench.versus import (
    PARTIAL_GRACE_S,
    Gang,
    broken_promises,
    gang_figures,
    percentile,
    slowest_call_le_s,
)


def gang(size: int, created: list[float], bound: list[tuple[float, str]], level: str = "rack") -> Gang:
    g = Gang("g", size, level)
    g.created = {f"m{i}": t for i, t in enumerate(created)}
    g.bound = {f"m{i}": b for i, b in enumerate(bound)}
    return g


RACK0 = ("node-00000", "node-00031")  # racks of 32 nodes
RACK1 = "node-00032"

CASES = [
    # (what, gang, end, expected subset of the figures)
    (
        "bound together in one rack",
        gang(2, [1.0, 2.0], [(2.5, RACK0[0]), (2.6, RACK0[1])]),
        10.0,
        {
            "gangs_whole": 1,
            "gangs_one_domain": 1,
            "gangs_partial_seen": 0,
            "whole_after_last_create_p50_s": 0.6,
        },
    ),
    (
        "whole but across two racks",
        gang(2, [1.0, 1.0], [(2.0, RACK0[0]), (2.1, RACK1)]),
        10.0,
        {"gangs_whole": 1, "gangs_one_domain": 0, "gangs_partial_seen": 0},
    ),
    (
        "members bound far apart: partial for a while, though whole at the end",
        gang(2, [1.0, 1.0], [(2.0, RACK0[0]), (2.0 + PARTIAL_GRACE_S + 0.5, RACK0[1])]),
        10.0,
        {"gangs_whole": 1, "gangs_partial_seen": 1, "gangs_partial_at_end": 0, "max_partial_s": 1.5},
    ),
    (
        "a gang of 1024 whose binds land over 3 s: its release, at the API server's write rate",
        gang(1024, [1.0] * 1024, [(2.0 + 3.0 * i / 1023, f"node-{i // 32:05d}") for i in range(1024)]),
        10.0,
        {"gangs_whole": 1, "gangs_partial_seen": 0, "max_partial_s": 3.0},
    ),
    (
        "the same gang's binds over 8 s: partial",
        gang(1024, [1.0] * 1024, [(2.0 + 8.0 * i / 1023, f"node-{i // 32:05d}") for i in range(1024)]),
        10.0,
        {"gangs_whole": 1, "gangs_partial_seen": 1, "max_partial_s": 8.0},
    ),
    (
        "one member bound, the other never: partial at the end",
        gang(2, [1.0, 1.0], [(2.0, RACK0[0])]),
        10.0,
        {"gangs_whole": 0, "gangs_partial_seen": 1, "gangs_partial_at_end": 1, "max_partial_s": 8.0},
    ),
    (
        "a block gang across racks of one block (blocks of 256 nodes) is in one domain",
        gang(2, [1.0, 1.0], [(2.0, RACK0[0]), (2.1, "node-00255")], level="block"),
        10.0,
        {"gangs_whole": 1, "gangs_one_domain": 1},
    ),
    (
        "a block gang across two blocks is not",
        gang(2, [1.0, 1.0], [(2.0, "node-00255"), (2.1, "node-00256")], level="block"),
        10.0,
        {"gangs_whole": 1, "gangs_one_domain": 0},
    ),
    (
        "nothing bound: waiting, not partial",
        gang(2, [1.0, 1.0], []),
        10.0,
        {
            "gangs_whole": 0,
            "gangs_partial_seen": 0,
            "gangs_partial_at_end": 0,
            "whole_after_last_create_p50_s": None,
        },
    ),
]


@pytest.mark.parametrize(("what", "g", "end", "expected"), CASES, ids=[c[0] for c in CASES])
def test_gang_figures(what: str, g: Gang, end: float, expected: dict) -> None:
    got = gang_figures([g], end=end)
    assert {k: got[k] for k in expected} == expected, what


def test_percentile_takes_the_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 21)], 0.95) == 19.0


GOOD = {
    "rack8": {
        "workload": "rack8",
        "gangs": 4,
        "gangs_whole": 4,
        "gangs_one_domain": 4,
        "gangs_partial_seen": 0,
    },
    "mixed": {
        "workload": "mixed",
        **{"gangs": 2, "gangs_whole": 2, "gangs_one_domain": 2, "gangs_partial_seen": 0},
        **{"plain": 3, "plain_bound": 3},
    },
    "race": {
        "workload": "race",
        "winner": "race-b",
        "loser_members_bound_while_waiting": 0,
        "deadlock": False,
    },
    "stream": {
        "workload": "stream",
        **{"small_gangs": 9, "small_whole": 9, "large_whole": True, "gangs_one_domain": 10},
    },
}

BROKEN = [
    ("rack8", {"gangs_whole": 3, "gangs_one_domain": 3}, "1 of 4 gangs not bound whole"),
    ("rack8", {"gangs_one_domain": 3}, "1 gang(s) spread over domains"),
    ("rack8", {"gangs_partial_seen": 1}, "partly bound"),
    ("mixed", {"plain_bound": 2}, "1 plain pod(s) never bound"),
    ("race", {"winner": "both"}, "expected exactly one whole gang"),
    ("race", {"loser_members_bound_while_waiting": 5}, "the loser held 5 bound member(s)"),
    ("race", {"deadlock": True}, "never bound after the winner left"),
    ("stream", {"large_whole": False, "gangs_one_domain": 9}, "the large one whole: False"),
    ("stream", {"gangs_one_domain": 8}, "spread over racks"),
]


@pytest.mark.parametrize("workload", sorted(GOOD))
def test_a_run_that_keeps_the_promise_breaks_nothing(workload: str) -> None:
    assert broken_promises(GOOD[workload]) == []


@pytest.mark.parametrize(("workload", "change", "says"), BROKEN, ids=[b[2] for b in BROKEN])
def test_each_broken_promise_is_named(workload: str, change: dict, says: str) -> None:
    found = broken_promises(GOOD[workload] | change)
    assert any(says in f for f in found), found


def histogram(verb: str, cumulative: dict[str, float]) -> dict[str, float]:
    """The service's request histogram as bench.scheduler.scrape reads it (labels in its order)."""
    return {
        f'gang_extender_request_seconds_bucket{{verb="{verb}",le="{le}"}}': n for le, n in cumulative.items()
    }


def test_the_slowest_call_is_the_bucket_the_last_new_call_fell_in() -> None:
    before = histogram("filter", {"0.001": 5, "0.01": 5, "0.1": 5, "+Inf": 5}) | histogram(
        "bind", {"0.001": 1, "0.01": 1, "0.1": 1, "+Inf": 1}
    )
    after = histogram("filter", {"0.001": 9, "0.01": 10, "0.1": 11, "+Inf": 11}) | histogram(
        "bind", {"0.001": 1, "0.01": 1, "0.1": 1, "+Inf": 1}
    )
    # filter: six new calls, the slowest under 0.1 s; bind: none new since the first scrape
    assert slowest_call_le_s(after, before) == {"filter": 0.1}
    past = histogram("bind", {"10.0": 2, "+Inf": 3})
    assert slowest_call_le_s(past, {}) == {"bind": float("inf")}
