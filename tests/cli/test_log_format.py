"""--log-format: a gang's steps as log lines with pod, gang and domain as fields, in text and in JSON."""

from __future__ import annotations

import io
import json
import logging
import socket
import subprocess
import sys

import pytest
import yaml

from extender.logformat import formatter
from extender.scheduling.decisions import Verdict
from extender.sim.cluster import topology
from tests.builders import gang_pod, make_kai_podgroup, make_node, rack_cluster
from tests.cli.test_cli import run
from tests.scheduling.test_fresh_reasons import RACK, world


@pytest.mark.parametrize(
    ("args", "env", "error"),
    [
        (["--log-format", "xml"], {}, "--log-format must be text or json, got 'xml'"),
        ([], {"GANG_EXTENDER_LOG_FORMAT": "yaml"}, "--log-format must be text or json, got 'yaml'"),
    ],
    ids=["the flag", "its environment twin"],
)
def test_an_unknown_log_format_is_refused(args, env, error):
    proc = run("serve", "--cluster", "x.yaml", *args, env=env)
    assert proc.returncode == 2 and error in proc.stderr


def gang_steps(fmt: str) -> str:
    """Plan a rack gang, let its plan time out, plan it again after the backoff, drop that plan (a
    node cordoned), and bind it: every step logged through the `fmt` formatter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter(fmt))
    logger = logging.getLogger("extender")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        w = world([*rack_cluster(racks=2, nodes_per_rack=2), topology("dc")])
        w.cluster.apply(make_kai_podgroup("train", min_member=2, topology=RACK))
        for i in range(2):
            w.cluster.apply(gang_pod(f"train-{i}", "train", cpu="4"))
        w.scheduler.filter(w.pod("train-0"), sorted(w.store.node_rows))  # planned; never bound
        w.tick(6.0)  # the hold ends: timed out, backing off 2s
        w.tick(2.5)
        assert w.filter("train-0") is Verdict.PASS  # planned again; train-0 waits at bind
        node = w.store.node(w.scheduler.ledger.entry("default/train").plan["default/train-1"].node)
        w.cluster.apply({**node, "spec": {"unschedulable": True}})  # the plan is dropped
        w.settle()
        assert w.filter("train-1") is Verdict.PASS
        assert w.filter("train-0") is Verdict.PASS  # completes the barrier: both bound
        assert all(w.pod(f"train-{i}")["spec"].get("nodeName") for i in range(2))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    return out.getvalue()


def test_gang_steps_are_json_objects_with_their_fields_as_keys():
    records = [json.loads(line) for line in gang_steps("json").splitlines()]
    for r in records:
        assert {"timestamp", "level", "logger", "message"} <= r.keys(), r
    steps = [r for r in records if r.get("gang") == "default/train"]
    planned = [r for r in steps if "pods planned" in r["message"]]
    assert planned[0] == {
        **planned[0],
        "level": "INFO",
        "logger": "extender.scheduling.filtering",
        "pod": "default/train-0",
        "domain": planned[0]["domain"],
        "members": 2,
    }
    assert planned[0]["domain"].startswith("rack r0")
    (timed_out,) = [r for r in steps if "timed out" in r["message"]]
    assert timed_out["level"] == "WARNING" and "backing off 2s" in timed_out["reason"]
    assert "reservation released" in timed_out["reason"] and "pod" not in timed_out  # none reached bind
    assert timed_out["domain"] == planned[0]["domain"]
    (replanned,) = [r for r in steps if "replanning" in r["message"]]
    assert "was removed or cordoned" in replanned["reason"] and replanned["domain"].startswith("rack")
    (bound,) = [r for r in steps if "bound together" in r["message"]]
    assert bound["level"] == "INFO" and bound["members"] == 2 and bound["pod"].startswith("default/train-")
    assert [r["message"] for r in steps].index(bound["message"]) == len(steps) - 1


def test_gang_steps_read_as_lines_with_key_value_fields_in_text():
    lines = gang_steps("text").splitlines()
    planned = next(line for line in lines if "pods planned" in line)
    assert " INFO extender.scheduling.filtering: gang default/train: 2 pods planned in rack r0" in planned
    assert planned.endswith(
        'pod=default/train-0 gang=default/train domain="'
        + planned.split('domain="')[1].split('"')[0]
        + '" members=2'
    )
    timed_out = next(line for line in lines if "timed out" in line)
    assert (
        " WARNING " in timed_out
        and "gang=default/train" in timed_out
        and 'reason="gang default/train' in timed_out
    )
    bound = next(line for line in lines if "bound together" in line)
    assert "members=2" in bound and "gang=default/train" in bound
    assert not any(line.startswith("{") for line in lines)


def test_serve_writes_json_lines(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(make_node("n000")))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["serve", "--cluster", str(cluster), "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**__import__("os").environ, "GANG_EXTENDER_LOG_FORMAT": "json"},
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        record = json.loads(line)
        assert record["level"] == "INFO" and record["logger"] == "extender.server.app"
        assert f"serving on http://127.0.0.1:{port}" in record["message"]
    finally:
        proc.terminate()
        proc.wait(timeout=15)
