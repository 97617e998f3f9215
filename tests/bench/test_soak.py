"""The figures and the verdict of `python -m bench soak`: histogram deltas -> p95, RSS, and what fails."""

from __future__ import annotations

import math

import pytest

from bench.soak import (
    Limits,
    bucket_delta,
    buckets,
    crept,
    quantile,
    rss_mib,
    split_key,
    verb_figures,
    verdict,
)

INF = math.inf

QUANTILE_CASES = [
    # (what, cumulative buckets, q, expected seconds)
    ("no observations", [(0.001, 0.0), (INF, 0.0)], 0.95, None),
    ("no buckets at all", [], 0.95, None),
    (
        "all in the first bucket: interpolated from 0",
        [(0.001, 10.0), (0.002, 10.0), (INF, 10.0)],
        0.5,
        0.0005,
    ),
    (
        "rank inside the second bucket",
        [(0.0005, 10.0), (0.001, 20.0), (INF, 20.0)],
        0.95,
        0.0005 + 0.0005 * 9 / 10,
    ),
    ("rank on a bucket's edge answers that edge", [(0.001, 10.0), (0.002, 20.0), (INF, 20.0)], 0.5, 0.001),
    ("empty buckets below are skipped", [(0.001, 0.0), (0.002, 0.0), (0.005, 4.0), (INF, 4.0)], 1.0, 0.005),
    ("rank in +Inf answers the highest finite bound", [(0.001, 1.0), (0.01, 2.0), (INF, 100.0)], 0.95, 0.01),
]


@pytest.mark.parametrize(
    ("what", "cumulative", "q", "expected"), QUANTILE_CASES, ids=[c[0] for c in QUANTILE_CASES]
)
def test_quantile(what: str, cumulative: list, q: float, expected: float | None) -> None:
    got = quantile(cumulative, q)
    if expected is None:
        assert got is None, what
    else:
        assert got == pytest.approx(expected), what


DELTA_CASES = [
    (
        "observations between the scrapes",
        [(0.001, 5.0), (0.002, 8.0), (INF, 9.0)],
        [(0.001, 15.0), (0.002, 28.0), (INF, 30.0)],
        [(0.001, 10.0), (0.002, 20.0), (INF, 21.0)],
    ),
    ("nothing before", [], [(0.001, 3.0), (INF, 3.0)], [(0.001, 3.0), (INF, 3.0)]),
    (
        "a count went down: the process restarted, the later scrape is all there is",
        [(0.001, 50.0), (INF, 50.0)],
        [(0.001, 2.0), (INF, 3.0)],
        [(0.001, 2.0), (INF, 3.0)],
    ),
]


@pytest.mark.parametrize(
    ("what", "before", "after", "expected"), DELTA_CASES, ids=[c[0] for c in DELTA_CASES]
)
def test_bucket_delta(what: str, before: list, after: list, expected: list) -> None:
    assert bucket_delta(after, before) == expected, what


def scrape_of(verb: str, counts: dict[str, float], sum_s: float) -> dict[str, float]:
    """A scrape as bench.scheduler.scrape returns it (prometheus_client sorts labels: le before verb)."""
    out = {f'gang_extender_request_seconds_bucket{{le="{le}",verb="{verb}"}}': c for le, c in counts.items()}
    out[f'gang_extender_request_seconds_count{{verb="{verb}"}}'] = counts["+Inf"]
    out[f'gang_extender_request_seconds_sum{{verb="{verb}"}}'] = sum_s
    return out


def test_split_key_and_buckets_pick_one_verb() -> None:
    assert split_key('x_bucket{le="0.5",verb="bind"}') == ("x_bucket", {"le": "0.5", "verb": "bind"})
    assert split_key("plain_total") == ("plain_total", {})
    samples = scrape_of("filter", {"0.001": 1.0, "+Inf": 2.0}, 0.1) | scrape_of(
        "bind", {"0.001": 7.0, "+Inf": 9.0}, 1
    )
    assert buckets(samples, "gang_extender_request_seconds", verb="filter") == [(0.001, 1.0), (INF, 2.0)]


def test_verb_figures_per_window() -> None:
    before = scrape_of("filter", {"0.0005": 100.0, "0.001": 100.0, "0.002": 100.0, "+Inf": 100.0}, 0.02)
    after = scrape_of("filter", {"0.0005": 150.0, "0.001": 190.0, "0.002": 200.0, "+Inf": 200.0}, 0.09)
    got = verb_figures(after, before, "filter")
    # 100 calls, 70 ms in all; rank 95 lies in (1 ms, 2 ms] holding calls 91..100: 1 + 1 * 5/10 ms
    assert got == {"filter_calls": 100, "filter_mean_ms": 0.7, "filter_p95_ms": 1.5}
    assert verb_figures(after, after, "filter") == {
        "filter_calls": 0,
        "filter_mean_ms": None,
        "filter_p95_ms": None,
    }


def test_rss_mib_reads_vmrss() -> None:
    assert rss_mib("Name:\tpython\nVmRSS:\t  262144 kB\nThreads:\t4\n") == 256.0
    assert rss_mib("Name:\tkthreadd\n") is None


# ---------------------------------------------------------------------------------- verdict


def window(n: int, *, warmup: bool = False, rss: float = 300.0, p95: float | None = 1.0) -> dict:
    return {"window": n, "warmup": warmup, "service_rss_mib": rss, "filter_p95_ms": p95}


GOOD_END = {
    "gangs_held": 0,
    "reservations_held": 0,
    "pods_cached": 0,
    "gangs_created": 40,
    "gangs_whole": 40,
    "gangs_one_rack": 40,
    "gangs_partial": 0,
    "plain_created": 30,
    "plain_bound": 30,
    "internal_errors": 0,
}
GOOD_WINDOWS = [
    window(1, warmup=True, rss=250.0, p95=9.0),
    window(2),
    window(3, rss=310.0),
    window(4, rss=312.0),
]

VERDICT_CASES = [
    # (what, windows, end overrides, expected substrings of the broken checks; empty: it held)
    ("all good (warm-up growth and warm-up latency do not count)", GOOD_WINDOWS, {}, []),
    (
        "RSS grew 5% or more after warm-up",
        [*GOOD_WINDOWS[:3], window(4, rss=315.0)],
        {},
        ["memory: service RSS grew 5.0%"],
    ),
    ("RSS shrank", [*GOOD_WINDOWS[:3], window(4, rss=200.0)], {}, []),
    (
        "filter p95 tripled by 6 ms: creep",
        [*GOOD_WINDOWS[:3], window(4, p95=9.0)],
        {"gangs_held": 0},
        ["latency"],
    ),
    ("filter p95 tripled but by 2 ms: noise floor", [*GOOD_WINDOWS[:3], window(4, p95=3.0)], {}, []),
    ("filter p95 up 6 ms but under 2x: not creep", [window(1, p95=8.0), window(2, p95=14.0)], {}, []),
    ("no filter call in the last window", [*GOOD_WINDOWS[:3], window(4, p95=None)], {}, ["no filter call"]),
    ("one window after warm-up", [window(1, warmup=True), window(2)], {}, ["only 1 window"]),
    (
        "leftovers: gangs, reservations, pods",
        GOOD_WINDOWS,
        {"gangs_held": 2, "gangs_held_names": ["soak/g000001"], "reservations_held": 16, "pods_cached": 1},
        ["2 gang(s) after the cluster settled: soak/g000001", "16 reservation(s)", "1 pod(s)"],
    ),
    ("leftovers unknown (the service did not answer)", GOOD_WINDOWS, {"gangs_held": None}, ["unknown"]),
    (
        "a gang never whole",
        GOOD_WINDOWS,
        {"gangs_whole": 39, "gangs_one_rack": 39},
        ["1 of 40 never bound whole"],
    ),
    ("a gang partial when deleted", GOOD_WINDOWS, {"gangs_partial": 1}, ["1 partly bound"]),
    ("a gang across racks", GOOD_WINDOWS, {"gangs_one_rack": 38}, ["2 bound across racks"]),
    ("a plain pod never bound", GOOD_WINDOWS, {"plain_bound": 29}, ["plain pods: 1 never bound"]),
    ("internal errors", GOOD_WINDOWS, {"internal_errors": 3}, ["3 internal error(s)"]),
    (
        "nothing created",
        GOOD_WINDOWS,
        {"gangs_created": 0, "gangs_whole": 0, "gangs_one_rack": 0},
        ["no gang"],
    ),
]


@pytest.mark.parametrize(
    ("what", "windows", "overrides", "expected"), VERDICT_CASES, ids=[c[0] for c in VERDICT_CASES]
)
def test_verdict(what: str, windows: list, overrides: dict, expected: list[str]) -> None:
    broken = verdict(windows, GOOD_END | overrides, Limits())
    assert len(broken) == len(expected), (what, broken)
    for line, part in zip(broken, expected, strict=True):
        assert part in line, (what, broken)


def test_verdict_thresholds_are_flags() -> None:
    grew_8 = [window(1), window(2, rss=324.0)]
    assert verdict(grew_8, GOOD_END, Limits(max_rss_growth=0.10)) == []
    assert len(verdict(grew_8, GOOD_END, Limits(max_rss_growth=0.05))) == 1
    assert crept(1.0, 4.0, Limits(creep_ratio=2.0, creep_floor_ms=2.0))
    assert not crept(1.0, 4.0, Limits(creep_ratio=5.0, creep_floor_ms=2.0))
    assert not crept(None, 4.0, Limits())
