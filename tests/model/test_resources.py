"""Quantities and pod requests, by Kubernetes' own rules."""

from fractions import Fraction

import pytest

from extender.model import resources as r


@pytest.mark.parametrize(
    ("text", "resource", "units"),
    [
        ("100m", "cpu", 100),
        ("1", "cpu", 1000),
        ("1.5", "cpu", 1500),
        ("2e3", "cpu", 2_000_000),
        ("0.1m", "cpu", 1),  # rounds up, as MilliValue does
        ("64Mi", "memory", 64 * 2**20),
        ("1.5Gi", "memory", 1610612736),
        ("1G", "memory", 10**9),
        ("500k", "memory", 500_000),
        ("1Ki", "ephemeral-storage", 1024),
        ("8", "nvidia.com/gpu", 8),
        ("1P", "memory", 10**15),
        ("3", "pods", 3),
        (2, "cpu", 2000),
        ("1e-3", "cpu", 1),
        ("0.5Mi", "memory", 2**19),
    ],
    ids=lambda v: str(v),
)
def test_quantities_parse_exactly(text, resource, units):
    assert r.to_units(resource, text) == units


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "10Mb", "--1", "1 Gi", "Gi", True, None, float("inf")])
def test_bad_quantities_are_rejected_with_examples(bad):
    with pytest.raises(r.QuantityError):
        r.parse_quantity(bad)


def test_parse_quantity_is_a_fraction():
    assert r.parse_quantity("100m") == Fraction(1, 10)


def _c(cpu=None, mem=None, gpu=None, limits=None, restart=None):
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem), ("nvidia.com/gpu", gpu)) if v is not None}
    c = {"name": "c", "resources": {"requests": req}}
    if limits:
        c["resources"]["limits"] = limits
    if restart:
        c["restartPolicy"] = restart
    return c


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"containers": [_c("100m", "64Mi")]},
            {"cpu": 100, "memory": 64 * 2**20, "pods": 1},
            id="one container",
        ),
        pytest.param(
            {"containers": [_c("1"), _c("500m")]}, {"cpu": 1500, "pods": 1}, id="app containers are summed"
        ),
        pytest.param(
            {"containers": [_c("1")], "initContainers": [_c("3")]},
            {"cpu": 3000, "pods": 1},
            id="a plain init container larger than the app takes the max",
        ),
        pytest.param(
            {"containers": [_c("1")], "initContainers": [_c(restart="Always", cpu="500m"), _c("3")]},
            {"cpu": 3500, "pods": 1},
            id="a sidecar runs alongside later init containers and the app",
        ),
        pytest.param(
            {"containers": [_c("2")], "initContainers": [_c(restart="Always", cpu="500m")]},
            {"cpu": 2500, "pods": 1},
            id="sidecar requests add to the app's",
        ),
        pytest.param(
            {"containers": [_c("1")], "overhead": {"cpu": "250m", "memory": "120Mi"}},
            {"cpu": 1250, "memory": 120 * 2**20, "pods": 1},
            id="pod overhead is added",
        ),
        pytest.param(
            {"containers": [{"name": "c", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}]},
            {"cpu": 2000, "nvidia.com/gpu": 1, "pods": 1},
            id="limits stand in for missing requests",
        ),
        pytest.param(
            {"containers": [_c("1", "1Gi")], "resources": {"requests": {"cpu": "4"}}},
            {"cpu": 4000, "memory": 2**30, "pods": 1},
            id="pod-level requests override cpu",
        ),
        pytest.param({"containers": [{"name": "c"}]}, {"pods": 1}, id="no requests is one pod slot"),
    ],
)
def test_pod_requests_follow_the_scheduler(spec, expected):
    assert r.pod_requests({"spec": spec}) == expected


def test_a_bad_quantity_names_its_field():
    with pytest.raises(r.QuantityError, match=r"spec.containers\[0\].resources.requests.cpu"):
        r.pod_requests({"spec": {"containers": [_c("lots")]}})


def test_node_allocatable_falls_back_to_capacity():
    assert r.node_allocatable({"status": {"capacity": {"cpu": "4", "pods": "110"}}}) == {
        "cpu": 4000,
        "pods": 110,
    }


@pytest.mark.parametrize(
    ("resource", "units", "text"),
    [
        ("cpu", 2500, "2500m"),
        ("memory", 3 * 2**30, "3Gi"),
        ("memory", 1000, "1000"),
        ("nvidia.com/gpu", 2, "2"),
    ],
)
def test_units_render_for_people(resource, units, text):
    assert r.units_text(resource, units) == text


def test_resource_index_keeps_core_columns_first():
    idx = r.ResourceIndex(["nvidia.com/gpu"])
    assert idx.names[:4] == ["cpu", "memory", "pods", "ephemeral-storage"]
    assert idx.column("nvidia.com/gpu") == 4
    assert idx.column("example.com/fpga") == 5
    assert idx.find("nope") is None


@pytest.mark.parametrize("bad", [[1], {"a": 1}, None], ids=["a list", "a map", "null"])
def test_a_quantity_of_the_wrong_type_is_a_quantity_error(bad):
    with pytest.raises(r.QuantityError, match="must be a string or number"):
        r.to_units("cpu", bad)


# Amounts the API server accepts but no node can hold (issue 9, defect 2): saturated at MAX_UNITS so
# that no int64 column downstream overflows, and computed without building 10**2000000000.
@pytest.mark.parametrize(
    ("text", "resource", "units"),
    [
        ("1e16", "cpu", r.MAX_UNITS),  # 10**19 millicores: beyond int64, crashed the store's watch
        ("1E", "memory", r.MAX_UNITS),
        ("8Ei", "ephemeral-storage", r.MAX_UNITS),
        ("1e2000000000", "cpu", r.MAX_UNITS),
        ("9" * 5000, "nvidia.com/gpu", r.MAX_UNITS),
        ("-1e16", "cpu", -r.MAX_UNITS),
        ("1e-2000000000", "cpu", 1),  # rounded up to the smallest unit, as MilliValue does
        ("0." + "0" * 5000 + "1", "memory", 1),
        ("0e2000000000", "cpu", 0),
        (10**30, "memory", r.MAX_UNITS),
        (1e300, "cpu", r.MAX_UNITS),
        ("1P", "memory", 10**15),  # below the bound: exact
    ],
    ids=lambda v: str(v)[:20],
)
def test_amounts_beyond_any_node_saturate(text, resource, units):
    assert r.to_units(resource, text) == units


def test_the_saturation_bound_leaves_room_for_sums_in_int64():
    assert r.MAX_UNITS >= 2**50, "1 PiB of memory, 10**12 cores: above any node"
    assert 8191 * r.MAX_UNITS < 2**63, "a gang of saturated pods sums without wrapping"


def test_pod_requests_saturate_after_summing_per_resource():
    huge = {"cpu": "1e16", "memory": "1e16"}
    spec = {
        "containers": [{"name": f"c{i}", "resources": {"requests": huge}} for i in range(5)]
        + [_c("100m", gpu="1")],
        "initContainers": [_c(restart="Always", cpu="1e16")],
        "overhead": {"cpu": "1e16"},
    }
    assert r.pod_requests({"spec": spec}) == {
        "cpu": r.MAX_UNITS,
        "memory": r.MAX_UNITS,
        "nvidia.com/gpu": 1,
        "pods": 1,
    }


def test_node_allocatable_saturates():
    node = {"status": {"allocatable": {"cpu": "1e16", "memory": "64Gi", "example.com/x": "1e30"}}}
    assert r.node_allocatable(node) == {
        "cpu": r.MAX_UNITS,
        "memory": 64 * 2**30,
        "example.com/x": r.MAX_UNITS,
    }


def test_a_huge_bad_quantity_is_named_briefly():
    with pytest.raises(r.QuantityError) as err:
        r.to_units("cpu", "1" * 100_000 + "x")
    assert len(str(err.value)) < 200 and "100001 characters" in str(err.value)
