"""kwok nodes: fake nodes whose pods run, become Ready and complete, for the tests where what a pod does
after it is bound matters (a gang that runs to completion, a finishing gang that is not stale).

Owns: a rack of such nodes, added to a ControlPlane for the length of a block and removed after it, and
the kwok process (sigs.k8s.io/kwok, the release kwok/go.mod pins, built once per machine) that plays their
kubelets with the stages in kwok/stages.yaml. The nodes carry a NoSchedule taint and a label, so only
pods that tolerate the taint and select the label land there: every other test keeps the plane's own
racks, and what they can hold, to itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from controlplane.start import ControlPlane, free_port, kwok_binary

STAGES = Path(__file__).with_name("kwok") / "stages.yaml"
LABEL = "type"
VALUE = "kwok"
TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
RACK_LABEL = "topology.kubernetes.io/rack"
BLOCK_LABEL = "example.com/block"


def placement() -> dict[str, object]:
    """What a pod's spec needs to land on the kwok nodes (and only there)."""
    return {
        "nodeSelector": {LABEL: VALUE},
        "tolerations": [
            {"key": TAINT["key"], "operator": "Equal", "value": TAINT["value"], "effect": "NoSchedule"}
        ],
    }


@contextlib.contextmanager
def kwok_rack(plane: ControlPlane, *, nodes: int, cpu: str, rack: str = "kwok-r0") -> Iterator[list[str]]:
    """`nodes` kwok nodes of `cpu` CPUs in one rack (block `kwok`), their pods run by kwok, until the
    block ends; yields their names. The nodes go afterwards (pods left on them go with them)."""
    binary = kwok_binary()
    names = [f"{rack}-n{i}" for i in range(nodes)]
    labels = {LABEL: VALUE, RACK_LABEL: rack, BLOCK_LABEL: "kwok"}
    for name in names:
        plane.add_node(name, labels=labels, cpu=cpu, taints=(TAINT,))
    argv = [
        binary,
        f"--kubeconfig={plane.kubeconfig}",
        f"--config={STAGES}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-label-selector={LABEL}={VALUE}",
        f"--server-address=127.0.0.1:{free_port()}",
    ]
    plane._spawn("kwok", argv)
    try:
        yield names
    finally:
        plane.kill("kwok")
        for name in names:
            plane.api.delete(f"/api/v1/nodes/{name}")
