"""Constraints resolve to node label keys through KAI Topology objects, with KAI's fallback order."""

from __future__ import annotations

import pytest

from extender.model.group import TopologyConstraint
from extender.scheduling.topology import TopologyError, resolve
from extender.sim.cluster import topology

ZONED = {
    "apiVersion": "kai.scheduler/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "zoned"},
    "spec": {
        "levels": [
            {"nodeLabel": "topology.kubernetes.io/zone", "alias": "zone"},
            {"nodeLabel": "example.com/block", "alias": "block"},
            {"nodeLabel": "topology.kubernetes.io/rack", "alias": "rack"},
            {"nodeLabel": "kubernetes.io/hostname"},
        ]
    },
}


class Lookup:
    def __init__(self, *objs):
        self.objs = {o["metadata"]["name"]: o for o in objs}

    def get(self, group, kind, namespace, name):
        return self.objs.get(name) if (group, kind) == ("kai.scheduler", "Topology") else None


@pytest.mark.parametrize(
    ("constraint", "required", "preferred", "fallback"),
    [
        pytest.param(
            TopologyConstraint("zoned", "zone", "rack"),
            "topology.kubernetes.io/zone",
            "topology.kubernetes.io/rack",
            ("example.com/block",),
            id="prefer a rack, else a block, inside the required zone",
        ),
        pytest.param(
            TopologyConstraint("zoned", None, "rack"),
            None,
            "topology.kubernetes.io/rack",
            ("example.com/block", "topology.kubernetes.io/zone"),
            id="a preferred level alone relaxes up to the top",
        ),
        pytest.param(
            TopologyConstraint("zoned", "block", None),
            "example.com/block",
            None,
            (),
            id="a required level alone has nothing to relax",
        ),
        pytest.param(
            TopologyConstraint(None, "topology.kubernetes.io/rack", None),
            "topology.kubernetes.io/rack",
            None,
            (),
            id="a scheduling.k8s.io key is the label itself",
        ),
        pytest.param(
            TopologyConstraint("zoned", "topology.kubernetes.io/zone", "example.com/block"),
            "topology.kubernetes.io/zone",
            "example.com/block",
            (),
            id="levels may be named by nodeLabel too",
        ),
    ],
)
def test_constraints_resolve_to_label_keys(constraint, required, preferred, fallback):
    keys = resolve(constraint, Lookup(ZONED, topology("dc")))
    assert (keys.required, keys.preferred, keys.fallback) == (required, preferred, fallback)


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        (TopologyConstraint("nope", "rack", None), "Requested topology nope does not exist"),
        (TopologyConstraint("zoned", "aisle", None), "topology zoned has no level 'aisle'"),
        (
            TopologyConstraint("zoned", "rack", "zone"),
            "preferred level 'zone' is above required level 'rack'",
        ),
    ],
    ids=["a missing Topology", "an unknown level", "preferred wider than required"],
)
def test_bad_constraints_say_what_is_wrong(constraint, message):
    with pytest.raises(TopologyError, match=message):
        resolve(constraint, Lookup(ZONED))
