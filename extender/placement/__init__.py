"""The placement core: cluster arrays, gang plans and per-node scores (numba kernels inside)."""

from extender.placement.api import (
    DomainOrder,
    GangRequest,
    LeafDemand,
    NameIndex,
    Outcome,
    Plan,
    Shortfall,
    TreeNode,
    fit_mask,
    index_names,
    plan_gang,
    rows_of_names,
    score_nodes,
    warm_up,
)
from extender.placement.layout import ClusterArrays

__all__ = [
    "ClusterArrays",
    "DomainOrder",
    "GangRequest",
    "LeafDemand",
    "NameIndex",
    "Outcome",
    "Plan",
    "Shortfall",
    "TreeNode",
    "fit_mask",
    "index_names",
    "plan_gang",
    "rows_of_names",
    "score_nodes",
    "warm_up",
]
