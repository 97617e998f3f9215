"""run_simulation(): what `gang-extender simulate` does with files, formats and bad input."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import pathlib

import pytest

from extender.sim.command import queue_run_failed, run_simulation
from extender.sim.driver import DriverOptions, PodOutcome, SimulationResult, simulate
from extender.sim.scenario import queue_scenario

FAST = DriverOptions(idle_timeout_s=10.0, idle_real_s=0.05, max_wall_s=20.0)

JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: hello, namespace: demo}
spec:
  parallelism: 2
  template:
    spec:
      containers:
        - name: c
          image: sleep:v0.1.0
          resources: {requests: {cpu: 100m}}
"""


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        pytest.param(None, "cannot read", id="a missing file is named"),
        pytest.param("kind: [unclosed", "not valid YAML", id="broken YAML is named"),
        pytest.param("- just\n- a list\n", "not a Kubernetes object", id="a document that is not an object"),
    ],
)
def test_bad_files_exit_2_with_a_message(tmp_path: pathlib.Path, content: str | None, needle: str) -> None:
    path = tmp_path / "in.yaml"
    if content is not None:
        path.write_text(content)
    err = io.StringIO()
    assert run_simulation([str(path)], out=io.StringIO(), err=err) == 2
    assert str(path) in err.getvalue() and needle in err.getvalue()


def test_an_unknown_format_exits_2() -> None:
    err = io.StringIO()
    assert run_simulation([], fmt="yaml", err=err) == 2
    assert "--format" in err.getvalue()


def test_a_file_without_nodes_runs_on_the_builtin_cluster_and_prints_json(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("extender.server.app")
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    out = io.StringIO()
    assert run_simulation([str(path)], fmt="json", options=FAST, out=out) == 0
    report = json.loads(out.getvalue())
    assert report["summary"]["pods_bound"] == report["summary"]["pods_total"] == 2
    assert report["cluster"]["nodes"] > 60
    assert [w["workload"] for w in report["workloads"]] == ["Job demo/hello"]


def lone_node() -> list[dict]:
    from extender.sim.cluster import node

    return [node("n0", labels={}, allocatable={"cpu": "4", "memory": "8Gi", "pods": "10"})]


def team_b_past_its_limit() -> list[dict]:
    """The queue scenario with team-b's limit at 16 GPUs: its running gangs (40 GPUs) break it."""
    objects = queue_scenario()
    for o in objects:
        if o["kind"] == "Queue" and o["metadata"]["name"] == "team-b":
            o["spec"]["resources"]["gpu"]["limit"] = 16
    return objects


def test_the_queue_scenario_is_reported_and_a_queue_past_its_limit_fails_the_command(monkeypatch) -> None:
    pytest.importorskip("extender.server.app")
    from extender.sim import command

    monkeypatch.setattr(command, "builtin_scenario", lone_node)
    monkeypatch.setattr(command, "preemption_scenario", lone_node)
    out = io.StringIO()
    assert run_simulation([], options=FAST, out=out) == 0
    assert (
        "held     queues/a3 (team-a): queue team-a: gpu limit 12, in use 12, gang needs 8" in out.getvalue()
    )
    assert "limit    team-a: peak in use 12 GPUs, never above its limit of 12" in out.getvalue()
    monkeypatch.setattr(command, "queue_scenario", team_b_past_its_limit)
    out = io.StringIO()
    assert run_simulation([], fmt="json", options=FAST, out=out) == 1
    breaches = json.loads(out.getvalue())["queues"]["breaches"]
    assert breaches and breaches[0].startswith(
        "queue team-b: nvidia.com/gpu in use 20 > limit 16 once queues/b3-"
    )
    out = io.StringIO()
    assert run_simulation([], options=FAST, out=out) == 1
    assert "limit    team-b: peak in use 40 GPUs, !!! WENT ABOVE its limit of 16" in out.getvalue()
    assert "!!! QUEUE OVER ITS LIMIT queue team-b: nvidia.com/gpu in use 20 > limit 16" in out.getvalue()


@pytest.fixture(scope="module")
def queue_run() -> SimulationResult:
    pytest.importorskip("extender.server.app")
    return asyncio.run(simulate(queue_scenario(), options=FAST))


def _evicted_in_part(r: SimulationResult) -> SimulationResult:
    pods = list(r.pods)
    i = next(i for i, p in enumerate(pods) if p.outcome is PodOutcome.EVICTED)
    pods[i] = dataclasses.replace(pods[i], outcome=PodOutcome.BOUND)
    return dataclasses.replace(r, pods=pods)


@pytest.mark.parametrize(
    ("broken", "fails"),
    [
        pytest.param(lambda r: r, False, id="the run as it went"),
        pytest.param(
            lambda r: dataclasses.replace(r, queue_breaches=["queue team-a: ..."]), True, id="past a limit"
        ),
        pytest.param(_evicted_in_part, True, id="a gang evicted in part"),
        pytest.param(
            lambda r: dataclasses.replace(r, queue_low_after_eviction={"team-b": {"nvidia.com/gpu": 4}}),
            True,
            id="a reclaim below the quota",
        ),
        pytest.param(
            lambda r: dataclasses.replace(r, overcommit=["q-r0-n0: gpu"]), True, id="over-committed"
        ),
    ],
)
def test_a_broken_queue_outcome_fails_the_run(queue_run: SimulationResult, broken, fails: bool) -> None:
    assert queue_run_failed(broken(queue_run)) is fails
