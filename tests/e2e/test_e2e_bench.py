"""The bench that needs a control plane runs its --quick form here, on each version it supports, so a
bench no one runs by hand cannot rot unseen (`bench versus` once crashed as it started the service):
the rack8 workload through a real kube-scheduler and the service, every gang whole in one rack."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.k8s(min="1.36", reason="bench versus runs 1.36 and later")]


def test_bench_versus_quick_binds_every_gang_whole(plane_version: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "versus",
            "--quick",
            "--nodes",
            "128",
            "--workloads",
            "rack8",
            "--configs",
            "extender",
            "--k8s",
            plane_version,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [orjson.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(r["config"], r["workload"]) for r in rows] == [("extender", "rack8")], done.stdout[-2000:]
    row = rows[0]
    assert row["gangs"] == 16 and row["gangs_whole"] == 16 and row["gangs_one_domain"] == 16, row
    assert row["gangs_partial_at_end"] == 0 and row["pods_bound"] == 128, row
    # every call answered inside the shipped httpTimeout (10 s; a bind may wait at its gang's barrier
    # for up to the gang wait, 8 s, by design), and no filter near it
    slowest = row["slowest_call_le_s"]
    assert {"filter", "bind"} <= slowest.keys(), slowest
    assert slowest["filter"] <= 5.0 and slowest["bind"] <= 10.0, slowest
