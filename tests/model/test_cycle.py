"""Which pods only kube-scheduler's own cycle can vouch for (model.cycle)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model.cycle import cycle_needed
from extender.state.projection import project

HOSTNAME = "kubernetes.io/hostname"


def pod(spec: dict[str, Any] | None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": labels or {"job": "train"}},
        "spec": "odd" if spec is None else {"containers": [{"name": "c", "image": "i"}], **spec},
    }


def anti(term: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


SELF = {"matchLabels": {"job": "train"}}
DEEP: list[Any] = []
for _ in range(3000):  # deeper than Python's recursion limit: its repr would raise
    DEEP = [DEEP]

CASES = [
    ("a plain training pod", {}, ""),
    ("config, secret, scratch and token volumes", {"volumes": [
        {"name": "a", "configMap": {"name": "x"}}, {"name": "b", "secret": {"secretName": "s"}},
        {"name": "c", "emptyDir": {}}, {"name": "d", "projected": {"sources": []}},
        {"name": "e", "downwardAPI": {"items": []}}]}, ""),
    ("one member per node (other pods the term matches are kube-scheduler's to check)",
     anti({"topologyKey": HOSTNAME, "labelSelector": SELF}), "required pod anti-affinity"),
    ("preferred anti-affinity only", {"affinity": {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}}, ""),
    ("a claim to bind", {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]},
     "its volume data is a persistentVolumeClaim volume"),
    ("an ephemeral volume", {"volumes": [{"name": "s", "ephemeral": {}}]}, "ephemeral volume"),
    ("a CSI inline volume (counted against the node's limit)", {"volumes": [{"name": "s", "csi": {}}]},
     "csi volume"),
    ("a host port", {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
     "host port 80"),
    ("a host port in an init container", {"initContainers": [{"name": "i", "ports": [{"hostPort": 9}]}]},
     "host port 9"),
    ("a container port alone", {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}, ""),
    ("dynamic resources", {"resourceClaims": [{"name": "gpu"}]}, "dynamic resources"),
    ("topology spread", {"topologySpreadConstraints": [{"maxSkew": 1}]}, "topology spread"),
    ("scheduling gates", {"schedulingGates": [{"name": "g"}]}, "scheduling gates"),
    ("required pod affinity", {"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": HOSTNAME}]}}},
     "required pod affinity"),
    ("anti-affinity by zone", anti({"topologyKey": "topology.kubernetes.io/zone", "labelSelector": SELF}),
     "required pod anti-affinity"),
    ("a hostile volume list", {"volumes": ["x", None]}, ""),
    ("its spec not an object", None, "its spec is not an object"),
    ("a hostile container", {"containers": ["x"]}, ""),
    ("volumes not a list", {"volumes": 5}, ""),
    ("containers not a list", {"containers": "x", "initContainers": 7}, ""),
    ("ports not a list", {"containers": [{"name": "c", "ports": 80}]}, ""),
    ("affinity not an object", {"affinity": [1]}, ""),
    ("pod affinity not an object", {"affinity": {"podAffinity": "x", "podAntiAffinity": [1]}}, ""),
    ("a volume keyed oddly", {"volumes": [{"name": "v", "hostPath": {}}]}, "hostPath volume"),
    ("a host port nested deep", {"containers": [{"name": "c", "ports": [{"hostPort": DEEP}]}]},
     "it asks for a host port"),
    ("a volume name nested deep", {"volumes": [{"name": DEEP, "nfs": {}}]}, "its volume is a nfs volume"),
    ("bound to no one (an empty nodeName)", {"nodeName": "", "containers": [
        {"name": "c", "ports": [{"hostPort": 80}]}]}, "host port 80"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "spec", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_pod_needs_its_own_cycle_only_for_filters_the_plan_does_not_model(name, spec, words):
    why = cycle_needed(pod(spec))
    assert why == cycle_needed(project(pod(spec)))  # the store's projection keeps the answer
    if words:
        assert words in why, why
    else:
        assert why == ""
