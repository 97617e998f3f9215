"""KAI's own podgrouper beside ours: the KAI seed's workloads on a real API server with KAI Scheduler's
real podgrouper (built from the KAI module at the release kai/go.mod pins) making the PodGroups and our
service running with `--podgrouper false`, as it would in a cluster where KAI's podgrouper runs.

For each workload the PodGroup KAI's podgrouper writes is compared, field by field, with the one our
podgrouper derives (`gang-extender podgroups -f`, the same derivation the service keeps): every field
must be equal or be one of the differences DIFFERENCES lists, each with the reason. Then the service
schedules the workload with KAI's PodGroup and binds it whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from controlplane.start import ControlPlane, available_or_skip, free_port, kai_podgrouper_binary, wait_until
from test_e2e_gangs import wait_all_bound
from test_e2e_podgroups import PODGROUPS, WORKLOADS

from extender.grouping import podgroup_objects

if TYPE_CHECKING:
    from conftest import Cluster

KAI_PODGROUPER = "kai-podgrouper"

ANY = "*"  # any value KAI writes there (a uid, a generated name)
WHY_NEWER = (
    "the seed is KAI's current contract, newer than v0.12.0, the newest KAI release the Go module proxy "
    "serves; ours follows the seed"
)
WHY_OWNER_COPY = (
    "KAI copies its top owner's labels and annotations onto the PodGroup; ours writes only its own"
)
WHY_TOP_OWNER = "KAI's bookkeeping of the top owner for its own podgrouper; ours reads the ownerReferences"
WHY_PRIORITY = (
    "KAI fills its per-kind default priority class (train), which KAI's install creates; ours leaves it "
    "unset, so the pods' own priority counts and no PriorityClass of KAI's is required"
)
WHY_OWNER_REF = (
    "ours marks the workload as the PodGroup's controller with blockOwnerDeletion, so a foreground "
    "delete of the workload waits for it; KAI sets neither"
)
WHY_EMPTY_TOPOLOGY = (
    "KAI writes an empty topologyConstraint; ours leaves the field out (the same: no constraint)"
)

# How many PodGroups KAI v0.12.0 makes for the workload (ours makes one).
KAI_COUNT = {
    # v0.12.0 schedules a Job pod by pod, one PodGroup per pod: `kai.scheduler/batch-min-member`, which
    # gangs it in the seed, is newer than v0.12.0
    "Job": 6,
    "JobSet": 1,
    "PyTorchJob": 1,
}

# (workload kind, dotted field path) -> (what KAI v0.12.0 writes there, why ours differs). The Job's row
# compares one of KAI's per-pod PodGroups with our one gang.
_COMMON: dict[str, tuple[Any, str]] = {
    "metadata.annotations.kai.scheduler/top-owner-metadata": (ANY, WHY_TOP_OWNER),
    "metadata.ownerReferences.0.blockOwnerDeletion": (None, WHY_OWNER_REF),
    "metadata.ownerReferences.0.controller": (None, WHY_OWNER_REF),
    "spec.priorityClassName": ("train", WHY_PRIORITY),
    "spec.topologyConstraint": ({}, WHY_EMPTY_TOPOLOGY),
}
DIFFERENCES: dict[tuple[str, str], tuple[Any, str]] = {
    **{("Job", path): v for path, v in _COMMON.items()},
    ("Job", "metadata.name"): (ANY, f"one PodGroup per pod (pg-<job>-<pod suffix>-<uid>): {WHY_NEWER}"),
    ("Job", "spec.minMember"): (1, f"each pod alone: {WHY_NEWER}"),
    ("Job", "metadata.annotations.kai.scheduler/batch-min-member"): ("2", WHY_OWNER_COPY),
    ("Job", "metadata.labels.batch.kubernetes.io/controller-uid"): (ANY, WHY_OWNER_COPY),
    ("Job", "metadata.labels.batch.kubernetes.io/job-name"): ("batch-job-min-member", WHY_OWNER_COPY),
    ("Job", "metadata.labels.controller-uid"): (ANY, WHY_OWNER_COPY),
    ("Job", "metadata.labels.job-name"): ("batch-job-min-member", WHY_OWNER_COPY),
    ("Job", "metadata.labels.kai.scheduler/queue"): ("default-queue", WHY_OWNER_COPY),
    **{("JobSet", path): v for path, v in _COMMON.items()},
    # v0.12.0 has no JobSet grouper: its default grouper makes one flat PodGroup of minMember 1
    ("JobSet", "spec.minMember"): (1, f"no JobSet grouping in v0.12.0: {WHY_NEWER}"),
    ("JobSet", "spec.minSubGroup"): (None, f"no subgroups in v0.12.0: {WHY_NEWER}"),
    **{
        ("JobSet", f"spec.subGroups.{path}"): (None, f"no subgroups in v0.12.0: {WHY_NEWER}")
        for path in (
            "0.minSubGroup",
            "0.name",
            "1.minMember",
            "1.name",
            "1.parent",
            "2.minMember",
            "2.name",
            "2.parent",
        )
    },
    **{("PyTorchJob", path): v for path, v in _COMMON.items()},
    ("PyTorchJob", "metadata.labels.kai.scheduler/queue"): ("default-queue", WHY_OWNER_COPY),
    **{
        ("PyTorchJob", f"spec.subGroups.{path}"): (None, f"no subgroups in v0.12.0: {WHY_NEWER}")
        for path in ("0.minMember", "0.name", "1.minMember", "1.name")
    },
}


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf fields of `obj` by dotted path (list items by index)."""
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(obj, list) and obj:
        out = {}
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}.{i}"))
        return out
    return {prefix: obj}


def compared(pg: dict[str, Any]) -> dict[str, Any]:
    """The fields both podgroupers decide: the spec, and the name, labels, annotations and owners."""
    meta = pg.get("metadata") or {}
    return {
        "metadata": {k: meta.get(k) for k in ("name", "labels", "annotations", "ownerReferences")},
        "spec": pg.get("spec") or {},
    }


def differences(kai_pg: dict[str, Any], ours: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    theirs, mine = flatten(compared(kai_pg)), flatten(compared(ours))
    return {
        path: (theirs.get(path), mine.get(path))
        for path in sorted(set(theirs) | set(mine))
        if theirs.get(path) != mine.get(path)
    }


@pytest.fixture(scope="module")
def kai_podgrouper(cluster: Cluster) -> Iterator[ControlPlane]:
    """KAI's podgrouper watching gang-scheduler's pods, and the service restarted with --podgrouper false
    on the same port (kube-scheduler keeps calling it); both put back as they were afterwards."""
    plane = cluster.plane
    binary = available_or_skip("KAI's podgrouper", kai_podgrouper_binary)
    port = int(cluster.service_url.rsplit(":", 1)[1])
    before = list(plane.service_args)
    plane.stop_service()
    plane.start_service(port=port, extra_args=[*before, "--podgrouper", "false"])
    plane._spawn(
        KAI_PODGROUPER,
        [
            binary,
            f"--kubeconfig={plane.kubeconfig}",
            "--scheduler-name=gang-scheduler",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            "--leader-elect=false",
        ],
    )
    try:
        yield plane
    finally:
        plane.kill(KAI_PODGROUPER)
        plane.stop_service()
        plane.start_service(port=port, extra_args=before)


def kai_podgroups(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return plane.api.get(PODGROUPS.format(ns=namespace))["items"]


@pytest.mark.parametrize("kind", list(WORKLOADS))
def test_kais_podgroup_equals_ours_but_for_the_listed_differences_and_binds_whole(
    cluster: Cluster, namespace: str, kai_podgrouper: ControlPlane, kind: str
) -> None:
    plane = kai_podgrouper
    create, _ = WORKLOADS[kind]
    workload, selector, pod_count = create(plane.api, namespace)
    (ours,) = podgroup_objects([workload])

    def made() -> list[dict[str, Any]]:
        plane._check_alive(KAI_PODGROUPER)
        return kai_podgroups(plane, namespace)

    try:
        got = wait_until(made, timeout_s=60, what=f"KAI's podgrouper to make the {kind}'s PodGroup")
    except AssertionError as exc:
        log = plane.log_tail(KAI_PODGROUPER, 40)
        raise AssertionError(f"{exc}\n--- kai-podgrouper log ---\n{log}") from None

    # all the PodGroups come, one per pod for a Job: wait for the count before comparing
    def all_made() -> list[dict[str, Any]] | None:
        pgs = made()
        return pgs if len(pgs) >= KAI_COUNT[kind] else None

    if len(got) < KAI_COUNT[kind]:
        got = wait_until(
            all_made,
            timeout_s=60,
            what=f"KAI's podgrouper to make {KAI_COUNT[kind]} PodGroups for the {kind}",
        )
    assert len(got) == KAI_COUNT[kind], f"{kind}: {[pg['metadata']['name'] for pg in got]}"
    theirs = got[0]
    found = differences(theirs, ours)
    listed = {path: expected for (k, path), expected in DIFFERENCES.items() if k == kind}
    unexplained = {
        path: pair
        for path, pair in found.items()
        if path not in listed or (listed[path][0] != ANY and listed[path][0] != pair[0])
    }
    assert not unexplained, f"{kind}: KAI's PodGroup and ours differ, (KAI, ours) by field: {unexplained}"
    # the owner's copied labels follow the version (1.20's Job controller adds no batch.kubernetes.io/*)
    gone = {p for p in set(listed) - set(found) if listed[p][1] != WHY_OWNER_COPY}
    assert not gone, f"{kind}: listed differences no longer seen (drop them from DIFFERENCES): {sorted(gone)}"

    # our service, its podgrouper off, schedules the workload with KAI's PodGroup
    wait_all_bound(plane.api, namespace, pod_count, selector)
