"""The `plane_version` and `plane` pytest fixtures, shared by tests/e2e (its conftest) and tests/state.

`plane_version` is session-scoped and parametrized over the control-plane versions, so pytest orders
the tests by version (every 1.20.2 test, then 1.36.2's, then 1.37.2's, across both directories) and
`plane` runs one control plane at a time: each version's processes stop before the next starts (2 cores).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from controlplane.start import VERSIONS, ControlPlane, plane_for_tests, stop_shared_plane, version_tuple


# Defined under other names (`name=`) so that modules importing them to use them (a fixture must be
# visible where it is used) do not shadow them with their own `plane` parameters.
@pytest.fixture(scope="session", params=VERSIONS, ids=[f"k8s-{v}" for v in VERSIONS], name="plane_version")
def plane_version_fixture(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session", name="plane")
def plane_fixture(plane_version: str) -> Iterator[ControlPlane]:
    """The control plane of this test's version; stopped when the session moves on to the next one."""
    yield plane_for_tests(plane_version)
    stop_shared_plane(plane_version)


# 1.20.2 runs only the modules that exercise what differs there (kube-scheduler's v1beta1 configuration
# and its extender calls for filter, bind and preempt, TLS to the extender, policy/v1beta1 evictions,
# lists and watches of an old API server); the rest run on 1.36.2 and 1.37.2. With three full tiers a
# warm `make test` took 35 minutes (fresh clone of a629338, warm machine cache); its budget is 30.
LEGACY_MODULES = frozenset(
    {
        "test_e2e_config_errors",
        "test_e2e_disruption",
        "test_e2e_gangs",
        "test_e2e_preemption_verb",
        "test_e2e_tls",
        "test_kube_source",
    }
)
LEGACY_THINNED = (
    "thinned on 1.20.2 to keep a warm `make test` under 30 minutes; runs on 1.36.2 and 1.37.2 "
    "(tests/e2e/controlplane/fixtures.py LEGACY_MODULES)"
)


def skip_outside_versions(items: list[pytest.Item]) -> None:
    """Skip, with its reason, a test marked `k8s(min=..., max=..., reason=...)` on versions outside
    [min, max], and on 1.20.2 a test outside LEGACY_MODULES; call from pytest_collection_modifyitems."""
    for item in items:
        marker = item.get_closest_marker("k8s")
        callspec = getattr(item, "callspec", None)
        if callspec is None or "plane_version" not in callspec.params:
            continue
        module = getattr(getattr(item, "module", None), "__name__", "").rpartition(".")[2]
        if callspec.params["plane_version"] == "1.20.2" and module not in LEGACY_MODULES:
            item.add_marker(pytest.mark.skip(reason=f"not on 1.20.2: {LEGACY_THINNED}"))
            continue
        if marker is None:
            continue
        version = version_tuple(callspec.params["plane_version"])
        low, high = marker.kwargs.get("min"), marker.kwargs.get("max")
        if (low and version < version_tuple(low)) or (high and version > version_tuple(high)):
            reason = marker.kwargs.get("reason", "version-specific")
            item.add_marker(pytest.mark.skip(reason=f"not on {callspec.params['plane_version']}: {reason}"))
