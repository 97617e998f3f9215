"""The README's "Why is my gang pending" recipes, run as written with the pinned kubectl against the tier: a
gang that fits nowhere shows its queue, quorum, phase and reason in the PodGroup columns, and each member
its reason in the pod columns."""

from __future__ import annotations

import shlex
import subprocess
from typing import TYPE_CHECKING

from controlplane.start import REPO, kubectl_or_skip, wait_until
from test_e2e_ledger import PODGROUPS, create_pod, member

from tests.builders import make_kai_podgroup

if TYPE_CHECKING:
    from conftest import Cluster


def recipe(starts: str) -> list[str]:
    """The README's command line that starts with `starts`, split as a shell would."""
    (line,) = [x for x in (REPO / "README.md").read_text().splitlines() if x.startswith(starts)]
    return shlex.split(line)


def columns(cluster: Cluster, argv: list[str]) -> list[dict[str, str]]:
    done = subprocess.run(
        [kubectl_or_skip(), "--kubeconfig", cluster.plane.kubeconfig, *argv[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    names = header.split()
    # the last column (WHY) holds spaces: split the others off the left
    return [dict(zip(names, row.split(None, len(names) - 1), strict=False)) for row in rows]


def test_the_readmes_kubectl_columns_say_why_a_gang_waits(cluster: Cluster, namespace: str) -> None:
    api = cluster.plane.api
    api.create(PODGROUPS.format(ns=namespace), make_kai_podgroup("huge", namespace=namespace, min_member=20))
    for i in range(20):
        create_pod(api, member(namespace, f"huge-{i}", "huge", cpu="4", labels={"app": "huge"}))
    groups = recipe("kubectl get podgroups.scheduling.run.ai -A")

    seen: list[dict[str, str]] = []

    def shown() -> dict[str, str] | None:
        seen[:] = [r for r in columns(cluster, groups) if r.get("NAMESPACE") == namespace]
        return seen[0] if seen and "of 20" in seen[0].get("WHY", "") else None

    try:
        row = wait_until(shown, timeout_s=60, what="the PodGroup columns to show why the gang waits")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the columns showed {seen}") from None
    assert (row["QUEUE"], row["MIN"], row["PHASE"]) == ("default-queue", "20", "Pending"), row
    assert row["WHY"].startswith(f"gang {namespace}/huge (20 pods): "), row
    members = recipe("kubectl get pods -n ml")
    members[members.index("ml")] = namespace

    def told() -> list[dict[str, str]] | None:
        rows = columns(cluster, members)
        return rows if len(rows) == 20 and all("of 20" in r.get("WHY", "") for r in rows) else None

    rows = wait_until(told, timeout_s=60, what="every member's column to say why it waits")
    assert all(r["NODE"] == "<none>" for r in rows), rows
