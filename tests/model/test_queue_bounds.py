"""A Queue's numbers past int64 (issue 21, defect 19): amounts and weights saturate, a priority out of
range is refused with the field, and nothing is computed at the size of the number written.

KAI keeps quota, limit and overQuotaWeight as float64, so `memory: {quota: 1e14}` (megabytes) is a
valid Queue: 10**20 bytes, past int64, which /debug/queues then failed to encode (HTTP 500).
"""

from __future__ import annotations

import time
from fractions import Fraction

import orjson
import pytest

from extender.model import queue as q
from extender.model.queue import GPU, QueueError, parse_queue
from extender.model.resources import CPU, MEMORY

INT64_MAX = 2**63 - 1


def queue(spec: dict) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}, "spec": spec}


def resources(**res: dict) -> dict:
    return queue({"resources": res})


@pytest.mark.parametrize(
    ("obj", "resource", "quota", "limit"),
    [
        pytest.param(
            resources(memory={"quota": 1e14, "limit": -1}), MEMORY, q.MAX_AMOUNT, None, id="1e14 MB"
        ),
        pytest.param(
            resources(cpu={"quota": 2**70}), CPU, q.MAX_AMOUNT, q.MAX_AMOUNT, id="an int past int64"
        ),
        pytest.param(resources(cpu={"quota": 1e300}), CPU, q.MAX_AMOUNT, q.MAX_AMOUNT, id="1e300"),
        pytest.param(
            resources(gpu={"quota": 0, "limit": "1e25"}), GPU, 0, q.MAX_AMOUNT, id="a limit past int64"
        ),
        pytest.param(
            resources(cpu={"quota": "1e2000000000"}), CPU, q.MAX_AMOUNT, q.MAX_AMOUNT, id="1e2000000000"
        ),
        pytest.param(resources(memory={"quota": "1e-2000000000"}), MEMORY, 0, 0, id="1e-2000000000"),
        pytest.param(resources(gpu={"quota": "  4 "}), GPU, 4, 4, id="a number in a string"),
        pytest.param(resources(cpu={"quota": 1.5}), CPU, 1, 1, id="a fraction of a millicore"),
    ],
)
def test_amounts_past_int64_saturate(obj: dict, resource: str, quota: int | None, limit: int | None) -> None:
    started = time.perf_counter()
    r = parse_queue(obj).resource(resource)
    assert time.perf_counter() - started < 1.0, "parsed at the size of the number written"
    assert (r.quota, r.limit) == (quota, limit)
    orjson.dumps({"quota": r.quota, "limit": r.limit})  # fits every consumer of int64


def test_the_bound_is_above_any_cluster_and_inside_int64() -> None:
    assert q.MAX_AMOUNT >= 2**60, "1 EiB of memory, 10**15 cores: above any cluster's total"
    assert 2 * q.MAX_AMOUNT <= INT64_MAX, "two saturated amounts still add up inside int64"


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        pytest.param("1e400", q.MAX_WEIGHT, id="past float64"),
        pytest.param(1e300, q.MAX_WEIGHT, id="1e300"),
        pytest.param("1e-2000000000", Fraction(1, 10**30), id="tiny but above 0"),
        pytest.param(2, Fraction(2), id="plain"),
    ],
)
def test_weights_saturate_and_stay_floats(weight, expected: Fraction) -> None:
    r = parse_queue(resources(cpu={"quota": 1, "overQuotaWeight": weight})).resource(CPU)
    assert r.weight == expected
    assert float(r.weight) > 0  # /debug/queues shows it as a float


@pytest.mark.parametrize("priority", [2**63, -(2**63) - 1, 2**70])
def test_a_priority_past_int64_is_refused_with_the_field(priority: int) -> None:
    with pytest.raises(QueueError, match=r"spec\.priority: .* outside"):
        parse_queue(queue({"priority": priority}))


def test_priorities_at_the_int64_ends_are_read() -> None:
    assert parse_queue(queue({"priority": INT64_MAX})).priority == INT64_MAX
    assert parse_queue(queue({"priority": -(2**63)})).priority == -(2**63)


@pytest.mark.parametrize("value", ["NaN", "inf", float("inf"), float("nan"), "1e", "0x10", ""])
def test_a_number_that_is_none_is_refused(value) -> None:
    with pytest.raises(QueueError, match=r"spec\.resources\.cpu\.quota: expected a number"):
        parse_queue(resources(cpu={"quota": value}))
