"""The simulator's built-in cluster: nodes in zones > blocks > racks, and its KAI Topology.

Sized so every seed workload fits at once and the contention scenario is a real contest:

- 2 blocks (one zone each) x 4 racks x 8 nodes; node `b<B>-r<R>-n<NN>`, rack `b<B>-r<R>`.
- Every node: 16 cpu, 64Gi memory, 110 pods.
- Rack b1-r3 is the general GPU rack (4 nvidia.com/gpu per node, 32 in all; the seeds ask 13).
- The "a100" pool, 8 GPUs per node, tainted `example.com/pool=a100:NoSchedule` so only pods that
  tolerate it land there: all of rack b0-r3 (8 nodes) plus 2 nodes of rack b1-r0. Ten nodes
  hold two 5-node gangs, but only one rack holds 5: with a rack constraint only one gang fits.
- Rack b1-r2 carries `cloud.google.com/gke-tpu-slice` (two slices of 4 nodes) for tpu-multislice.
- b0-r0-n07 is cordoned and a control-plane node is tainted, so the in-tree filters have work.
"""

from __future__ import annotations

from typing import Any

ZONE = "topology.kubernetes.io/zone"
BLOCK = "example.com/block"
RACK = "topology.kubernetes.io/rack"
HOSTNAME = "kubernetes.io/hostname"
TPU_SLICE = "cloud.google.com/gke-tpu-slice"
POOL = "example.com/pool"
GPU = "nvidia.com/gpu"
TOPOLOGY_NAME = "cluster-topology"

A100_RACK = (0, 3)  # (block, rack): the whole rack is a100
A100_EXTRA = (1, 0)  # a rack with two a100 nodes at its end
A100_EXTRA_NODES = 2
GPU_RACK = (1, 3)
TPU_RACK = (1, 2)
CORDONED = (0, 0, 7)  # (block, rack, node)
CONTROL_PLANE = "control-plane-0"


def node_name(block: int, rack: int, node: int) -> str:
    return f"b{block}-r{rack}-n{node:02d}"


def rack_name(block: int, rack: int) -> str:
    return f"b{block}-r{rack}"


def build_cluster(
    *,
    blocks: int = 2,
    racks_per_block: int = 4,
    nodes_per_rack: int = 8,
    node_cpu: str = "16",
    node_memory: str = "64Gi",
    control_plane: bool = True,
) -> list[dict[str, Any]]:
    """Node objects in zones > blocks > racks plus the `cluster-topology` Topology.

    Special racks (GPU, a100, TPU, the cordoned node) exist only where the shape has room for
    them, so a small shape is a plain cluster.
    """
    if blocks < 1 or racks_per_block < 1 or nodes_per_rack < 1:
        raise ValueError("build_cluster: blocks, racks_per_block and nodes_per_rack must each be >= 1")
    objects: list[dict[str, Any]] = [topology()]
    for b in range(blocks):
        zone = f"zone-{chr(ord('a') + b % 26)}"
        for r in range(racks_per_block):
            for n in range(nodes_per_rack):
                name = node_name(b, r, n)
                labels = {ZONE: zone, BLOCK: f"b{b}", RACK: rack_name(b, r), HOSTNAME: name}
                allocatable = {"cpu": node_cpu, "memory": node_memory, "pods": "110"}
                taints: list[dict[str, str]] = []
                a100 = (b, r) == A100_RACK or (
                    (b, r) == A100_EXTRA and n >= nodes_per_rack - A100_EXTRA_NODES and nodes_per_rack > 2
                )
                if a100:
                    labels[POOL] = "a100"
                    allocatable[GPU] = "8"
                    taints.append({"key": POOL, "value": "a100", "effect": "NoSchedule"})
                elif (b, r) == GPU_RACK:
                    labels[POOL] = "gpu"
                    allocatable[GPU] = "4"
                if (b, r) == TPU_RACK:
                    labels[TPU_SLICE] = f"tpu-slice-{n * 2 // nodes_per_rack}"
                objects.append(
                    node(
                        name,
                        labels=labels,
                        allocatable=allocatable,
                        taints=taints,
                        cordoned=(b, r, n) == CORDONED,
                    )
                )
    if control_plane:
        objects.append(
            node(
                CONTROL_PLANE,
                labels={ZONE: "zone-a", HOSTNAME: CONTROL_PLANE, "node-role.kubernetes.io/control-plane": ""},
                allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"},
                taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
            )
        )
    return objects


def node(
    name: str,
    *,
    labels: dict[str, str],
    allocatable: dict[str, str],
    taints: list[dict[str, str]] | None = None,
    cordoned: bool = False,
) -> dict[str, Any]:
    """A Ready Node object as the API server would return it."""
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
        spec.setdefault("taints", []).append(
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
        )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": dict(allocatable),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def topology(name: str = TOPOLOGY_NAME) -> dict[str, Any]:
    """The KAI Topology block > rack > host (identical to the one kai-jobset-topology.yaml ships)."""
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {
            "levels": [
                {"nodeLabel": BLOCK, "alias": "block"},
                {"nodeLabel": RACK, "alias": "rack"},
                {"nodeLabel": HOSTNAME},
            ]
        },
    }
