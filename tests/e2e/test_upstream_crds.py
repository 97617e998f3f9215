"""The upstream CRDs the e2e tier applies (controlplane/upstream.py: KAI's, JobSet's and the
training-operator's, from their pinned Go modules) are the kinds and versions the service reads, and
what the service writes to them is inside their schemas.

Fast checks (no control plane); they need the Go module proxy once per machine, and skip without it
(fail under CI=true), as the control plane does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane.start import cache_root
from controlplane.upstream import JOBSET, KAI, MODULES, UpstreamUnavailable, fetch, table_digest

from extender.grouping import kai
from extender.scheduling.status import group_status
from extender.state.kube import DEFAULT_KINDS
from tests.grouping.workloads import expand
from tests.scheduling.test_podgrouper import job, managed_pg_of, store_of


@pytest.fixture(scope="module")
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    try:
        directory = fetch(cache_root())
    except UpstreamUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and the upstream CRDs are unavailable: {exc}", pytrace=False)
        pytest.skip(f"upstream CRDs unavailable: {exc}")
    out = {}
    for path in sorted(Path(directory).glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if crd:
                out[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd
    return out


def schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return v["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize(
    ("group", "kind", "version", "scope", "status_written"),
    [
        ("scheduling.run.ai", "PodGroup", "v2alpha2", "Namespaced", True),
        ("scheduling.run.ai", "Queue", "v2", "Cluster", True),
        ("kai.scheduler", "Topology", "v1alpha1", "Cluster", False),
        ("jobset.x-k8s.io", "JobSet", "v1alpha2", "Namespaced", False),
        ("kubeflow.org", "PyTorchJob", "v1", "Namespaced", False),
    ],
)
def test_each_upstream_crd_serves_the_version_the_service_reads(
    crds, group, kind, version, scope, status_written
) -> None:
    crd = crds[(group, kind)]
    assert crd["spec"]["scope"] == scope
    served = {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}
    assert version in served, f"{kind}.{group} serves {sorted(served)}"
    if status_written:  # the service patches its /status
        assert served[version].get("subresources", {}).get("status") == {}
    # the service's cluster source asks for this version among those it knows for the kind
    watched = [k for k in DEFAULT_KINDS if (k.group, k.kind) == (group, kind)]
    assert watched and version in watched[0].versions


def test_the_jobset_crd_is_the_releases_with_only_spec_scheduling_added(crds) -> None:
    spec = schema(crds[("jobset.x-k8s.io", "JobSet")], "v1alpha2")["properties"]["spec"]
    assert spec["properties"]["scheduling"]["x-kubernetes-preserve-unknown-fields"] is True
    # the rest is JobSet's own structural schema (no blanket preserve-unknown-fields)
    assert "x-kubernetes-preserve-unknown-fields" not in spec
    assert {"replicatedJobs", "startupPolicy", "suspend"} <= set(spec["properties"])


@pytest.mark.parametrize("phase", ["Pending", "Running"])
def test_the_kai_status_the_service_writes_has_only_fields_kais_crd_defines(crds, phase: str) -> None:
    """A field outside KAI's PodGroup status schema would be pruned by the API server."""
    status_schema = schema(crds[("scheduling.run.ai", "PodGroup")], "v2alpha2")["properties"]["status"]
    fields = status_schema["properties"]
    workload = job(parallelism=2)
    _, pods = expand(workload)
    store = store_of([workload, *pods])
    store.upsert(managed_pg_of(workload, store))
    group = store.membership(next(iter(store.pods.values()))).group
    effect = group_status(store, group, phase, "gang default/x waiting for pods")
    assert effect is not None and effect.name == kai.derived_name(workload)
    status = effect.data["status"]
    assert set(status) <= set(fields), set(status) - set(fields)
    assert (status["running"], status["pending"]) == (0, 2)
    for cond in status["schedulingConditions"] or ():
        assert set(cond) <= set(fields["schedulingConditions"]["items"]["properties"])
        assert cond["message"] == "gang default/x waiting for pods"
    assert (status["schedulingConditions"] is None) == (phase == "Running")


def test_the_table_pins_each_module_by_its_go_sum_hash() -> None:
    for module in MODULES:
        assert module.go_sum.startswith("h1:") and module.version.startswith("v")
    assert KAI.version == "v0.12.0" and JOBSET.version == "v0.12.0"
    assert table_digest() != table_digest(MODULES[:-1]), "the cache directory follows the table"


def test_a_module_whose_hash_differs_from_the_pin_is_refused(tmp_path) -> None:
    import dataclasses

    wrong = dataclasses.replace(KAI, go_sum="h1:" + "A" * 43 + "=", crds=KAI.crds[:1])
    with pytest.raises(UpstreamUnavailable, match="pinned h1:AAAA"):
        try:
            fetch(tmp_path, (wrong,))
        except UpstreamUnavailable as exc:
            if "hash" not in str(exc):
                pytest.skip(f"the module proxy is unavailable: {exc}")
            raise


def _string(**more: Any) -> dict[str, Any]:
    return {"type": "string", **more}


@pytest.mark.parametrize(
    ("schema_in", "schema_out"),
    [
        # an object reference's name: the empty default goes
        ({"properties": {"name": _string(default="")}}, {"properties": {"name": _string()}}),
        # a default that is not the empty string, or not on a string, stays
        ({"properties": {"name": _string(default="x")}}, {"properties": {"name": _string(default="x")}}),
        ({"type": "integer", "default": 0}, {"type": "integer", "default": 0}),
        # a list-map key that loses its default becomes required (1.20 wants one or the other)
        (
            {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"properties": {"name": _string(default="")}},
            },
            {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"properties": {"name": _string()}, "required": ["name"]},
            },
        ),
        # a key already required, or keeping a default, is left as it is
        (
            {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port"],
                "items": {"properties": {"port": {"type": "integer", "default": 80}}},
            },
            {
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port"],
                "items": {"properties": {"port": {"type": "integer", "default": 80}}},
            },
        ),
    ],
    ids=["empty default dropped", "other default kept", "non-string kept", "key made required", "key kept"],
)
def test_a_crd_for_1_20_loses_only_the_empty_string_defaults(schema_in, schema_out) -> None:
    from controlplane.upstream import for_apiserver_1_20

    crd = {"spec": {"versions": [{"schema": {"openAPIV3Schema": schema_in}}]}}
    assert for_apiserver_1_20(crd) == {"spec": {"versions": [{"schema": {"openAPIV3Schema": schema_out}}]}}
    assert crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == schema_in, "the input is left alone"


def test_the_kai_podgroup_crd_is_the_releases_with_only_min_sub_group_added(crds) -> None:
    spec = schema(crds[("scheduling.run.ai", "PodGroup")], "v2alpha2")["properties"]["spec"]["properties"]
    for node in (spec, spec["subGroups"]["items"]["properties"]):
        assert node["minSubGroup"]["type"] == "integer"
    # the rest is KAI v0.12.0's: its own fields, and no blanket preserve-unknown-fields
    assert {"minMember", "queue", "subGroups", "topologyConstraint"} <= set(spec)
    assert set(spec["subGroups"]["items"]["properties"]) == {
        "minMember",
        "name",
        "parent",
        "topologyConstraint",
        "minSubGroup",
    }
