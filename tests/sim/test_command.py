"""run_simulation(): what `gang-extender simulate` does with files, formats and bad input."""

from __future__ import annotations

import io
import json
import pathlib

import pytest

from extender.sim.command import run_simulation
from extender.sim.driver import DriverOptions

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
