"""The simulated kube-scheduler's in-tree filters: which nodes it sends to the extender, and why not."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model.resources import pod_requests
from extender.sim.cluster import node
from extender.sim.intree import NodeState, filter_nodes, fit_error


def make_node(
    name: str = "n1",
    *,
    labels: dict | None = None,
    taints: list | None = None,
    cordoned: bool = False,
    cpu: str = "4",
    gpu: str | None = None,
) -> NodeState:
    alloc = {"cpu": cpu, "memory": "8Gi", "pods": "10"}
    if gpu:
        alloc["nvidia.com/gpu"] = gpu
    return NodeState.of(node(name, labels=labels or {}, allocatable=alloc, taints=taints, cordoned=cordoned))


def make_pod(**spec: Any) -> dict:
    spec.setdefault("containers", [{"name": "c", "resources": {"requests": {"cpu": "1"}}}])
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def affinity(*exprs: dict) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]
            }
        }
    }


NO_SCHEDULE = {"key": "pool", "value": "a100", "effect": "NoSchedule"}
GPU_POD = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]


@pytest.mark.parametrize(
    ("node_state", "pod", "reason"),
    [
        pytest.param(make_node(), make_pod(), None, id="a plain pod fits a plain node"),
        pytest.param(
            make_node(cordoned=True),
            make_pod(),
            "node(s) were unschedulable",
            id="a cordoned node is skipped",
        ),
        pytest.param(
            make_node(taints=[NO_SCHEDULE]),
            make_pod(),
            "node(s) had untolerated taint {pool: a100}",
            id="an untolerated NoSchedule taint rejects",
        ),
        pytest.param(
            make_node(taints=[{**NO_SCHEDULE, "effect": "NoExecute"}]),
            make_pod(),
            "node(s) had untolerated taint {pool: a100}",
            id="an untolerated NoExecute taint rejects",
        ),
        pytest.param(
            make_node(taints=[{**NO_SCHEDULE, "effect": "PreferNoSchedule"}]),
            make_pod(),
            None,
            id="a PreferNoSchedule taint does not filter",
        ),
        pytest.param(
            make_node(taints=[NO_SCHEDULE]),
            make_pod(
                tolerations=[{"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}]
            ),
            None,
            id="an Equal toleration with the same value tolerates",
        ),
        pytest.param(
            make_node(taints=[NO_SCHEDULE]),
            make_pod(tolerations=[{"key": "pool", "operator": "Equal", "value": "h100"}]),
            "node(s) had untolerated taint {pool: a100}",
            id="an Equal toleration with another value does not",
        ),
        pytest.param(
            make_node(taints=[NO_SCHEDULE]),
            make_pod(tolerations=[{"operator": "Exists"}]),
            None,
            id="an empty-key Exists toleration tolerates everything",
        ),
        pytest.param(
            make_node(taints=[NO_SCHEDULE]),
            make_pod(tolerations=[{"key": "pool", "operator": "Exists", "effect": "NoExecute"}]),
            "node(s) had untolerated taint {pool: a100}",
            id="a toleration for another effect does not",
        ),
        pytest.param(
            make_node(labels={"disk": "ssd"}),
            make_pod(nodeSelector={"disk": "ssd"}),
            None,
            id="a matching nodeSelector passes",
        ),
        pytest.param(
            make_node(labels={"disk": "hdd"}),
            make_pod(nodeSelector={"disk": "ssd"}),
            "node(s) didn't match Pod's node affinity/selector",
            id="a mismatching nodeSelector rejects",
        ),
        pytest.param(
            make_node(labels={"zone": "a"}),
            make_pod(affinity=affinity({"key": "zone", "operator": "In", "values": ["a", "b"]})),
            None,
            id="required affinity In matches a listed value",
        ),
        pytest.param(
            make_node(labels={"zone": "c"}),
            make_pod(affinity=affinity({"key": "zone", "operator": "In", "values": ["a"]})),
            "node(s) didn't match Pod's node affinity/selector",
            id="required affinity In rejects other values",
        ),
        pytest.param(
            make_node(labels={}),
            make_pod(affinity=affinity({"key": "zone", "operator": "NotIn", "values": ["a"]})),
            None,
            id="required affinity NotIn matches a node without the label",
        ),
        pytest.param(
            make_node(labels={"gpu": ""}),
            make_pod(affinity=affinity({"key": "gpu", "operator": "Exists"})),
            None,
            id="required affinity Exists matches an empty label",
        ),
        pytest.param(
            make_node(labels={}),
            make_pod(affinity=affinity({"key": "gpu", "operator": "Exists"})),
            "node(s) didn't match Pod's node affinity/selector",
            id="required affinity Exists rejects a missing label",
        ),
        pytest.param(make_node(cpu="500m"), make_pod(), "Insufficient cpu", id="too little cpu rejects"),
        pytest.param(
            make_node(),
            make_pod(containers=GPU_POD),
            "Insufficient nvidia.com/gpu",
            id="a node without the extended resource rejects",
        ),
        pytest.param(
            make_node(gpu="2"), make_pod(containers=GPU_POD), None, id="limits stand in for extended requests"
        ),
    ],
)
def test_filter(node_state: NodeState, pod: dict, reason: str | None) -> None:
    passed, reasons = filter_nodes(pod, pod_requests(pod), [node_state])
    if reason is None:
        assert passed == [node_state.name] and not reasons
    else:
        assert passed == [] and dict(reasons) == {reason: 1}


def test_usage_counts_against_capacity() -> None:
    n = make_node(cpu="2")
    pod = make_pod()
    req = pod_requests(pod)
    n.add(req)
    assert filter_nodes(pod, req, [n])[0] == ["n1"]
    n.add(req)
    assert filter_nodes(pod, req, [n])[0] == []
    n.add(req, -1)
    assert filter_nodes(pod, req, [n])[0] == ["n1"]


def test_fit_error_reads_like_kube_scheduler() -> None:
    assert fit_error(5, {"Insufficient cpu": 3, "node(s) were unschedulable": 2}) == (
        "0/5 nodes are available: 3 Insufficient cpu, 2 node(s) were unschedulable."
    )
