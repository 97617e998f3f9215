"""Grouping: which gang each pod belongs to and what that gang requires (KAI's podgrouper
contract, external KAI PodGroups, scheduling.k8s.io PodGroups and JobSet `spec.scheduling`).
Pure code over plain JSON objects; the cluster cache feeds it through an `ObjectLookup`."""

from extender.grouping.base import GroupingError, ListLookup, ObjectLookup
from extender.grouping.jobset_scheduling import SCHEDULING_API_VERSIONS, JobSetCompilation, compile_jobset
from extender.grouping.membership import (
    WORKLOAD_KINDS,
    derive_membership,
    groups_for_workload,
    invalid_subgroup_message,
    is_single_pod,
    podgroup_objects,
)

__all__ = [
    "SCHEDULING_API_VERSIONS",
    "WORKLOAD_KINDS",
    "GroupingError",
    "JobSetCompilation",
    "ListLookup",
    "ObjectLookup",
    "compile_jobset",
    "derive_membership",
    "groups_for_workload",
    "invalid_subgroup_message",
    "is_single_pod",
    "podgroup_objects",
]
