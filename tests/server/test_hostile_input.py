"""Malformed and hostile extender requests: every one is a WireError (HTTP 400) with one short line.

Table-driven against the wire functions directly, then the same tables through the HTTP app; then
fuzzes that replace random parts of a valid body with random JSON, against the wire functions and
through a running service (whatever the wire layer lets through must not fault the scheduler).
"""

from __future__ import annotations

import asyncio
import copy
import gzip
import logging
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.config import default_settings
from extender.server import wire
from extender.server.app import build_app
from extender.state.embedded import EmbeddedCluster
from tests.builders import make_node, make_pod, rack_cluster

MAX_REASON = 310  # the reason cap (300) plus an ellipsis, with room to spare


def assert_one_short_line(reason: str) -> None:
    assert reason, "a reason must say something"
    assert len(reason.splitlines()) == 1, f"reason is not one line: {reason!r}"
    assert "\n" not in reason and "\r" not in reason
    assert len(reason) <= MAX_REASON, f"reason is {len(reason)} characters"


def full_pod() -> dict[str, Any]:
    """A pod using every field the wire layer checks, valid."""
    pod = make_pod(
        "worker-0",
        namespace="ml",
        uid="6f1c2d9e-0000-4000-8000-000000000001",
        labels={"app": "train", "role": "worker"},
        annotations={"note": "x"},
        owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "train", "uid": "j1"}},
    )
    spec = pod["spec"]
    spec["containers"].append(
        {"name": "side", "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "64Mi"}}}
    )
    spec["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1.5Gi"}}},
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
    ]
    spec["overhead"] = {"cpu": "10m", "memory": "2e6"}
    spec["nodeSelector"] = {"topology.kubernetes.io/rack": "r00"}
    spec["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "example.com/block", "operator": "In", "values": ["b0"]}]}
                ]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"role": "worker"}},
                }
            ]
        },
    }
    spec["priorityClassName"] = "high"
    return pod


NODE_NAMES = ["n000", "n001", "n010"]


def filter_doc(pod: Any = None) -> dict[str, Any]:
    return {"Pod": full_pod() if pod is None else pod, "Nodes": None, "NodeNames": list(NODE_NAMES)}


def with_pod(**changes: Any) -> dict[str, Any]:
    """A filter body whose pod has `changes` applied: "spec.containers.0.resources" = value."""
    pod = full_pod()
    for path, value in changes.items():
        *parents, last = path.split("__")
        node: Any = pod
        for step in parents:
            node = node[int(step)] if isinstance(node, list) else node[step]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return filter_doc(pod)


def raw(doc: Any) -> bytes:
    return orjson.dumps(doc)


def nested(depth: int, leaf: bytes = b"1") -> bytes:
    return b'{"a":' * depth + leaf + b"}" * depth


# (body, what the reason must mention); each is refused by filter and prioritize alike
BAD_FILTER = [
    pytest.param(raw(with_pod(metadata=[])), "Pod.metadata must be an object", id="metadata a list"),
    pytest.param(raw(with_pod(metadata="p")), "Pod.metadata must be an object", id="metadata a string"),
    pytest.param(raw(with_pod(metadata__name=7)), "Pod.metadata.name", id="name a number"),
    pytest.param(raw(with_pod(metadata__name="")), "Pod.metadata.name", id="name empty"),
    pytest.param(
        raw(with_pod(metadata__name="p\n2026 INFO forged")), "is not a valid name", id="a newline in the name"
    ),
    pytest.param(raw(with_pod(metadata__name="Train-0")), "is not a valid name", id="an upper-case name"),
    pytest.param(raw(with_pod(metadata__name="a" * 254)), "is not a valid name", id="a name past 253"),
    pytest.param(
        raw(with_pod(metadata__namespace="ml.team")), "is not a valid namespace", id="a dotted namespace"
    ),
    pytest.param(raw(with_pod(metadata__namespace=["ml"])), "Pod.metadata.namespace", id="namespace a list"),
    pytest.param(raw(with_pod(metadata__uid={})), "Pod.metadata.uid", id="uid an object"),
    pytest.param(raw(with_pod(metadata__labels=["a"])), "Pod.metadata.labels", id="labels a list"),
    pytest.param(
        raw(with_pod(metadata__labels={"a": 1})), "Pod.metadata.labels.a", id="label value a number"
    ),
    pytest.param(
        raw(with_pod(metadata__annotations={"a": None})), "Pod.metadata.annotations.a", id="annotation null"
    ),
    pytest.param(
        raw(with_pod(metadata__ownerReferences={"kind": "Job"})),
        "Pod.metadata.ownerReferences",
        id="ownerReferences an object",
    ),
    pytest.param(
        raw(with_pod(metadata__ownerReferences=["Job"])),
        "Pod.metadata.ownerReferences[0]",
        id="ownerReference a string",
    ),
    pytest.param(
        raw(with_pod(metadata__ownerReferences__0__controller="yes")),
        "ownerReferences[0].controller",
        id="controller a string",
    ),
    pytest.param(raw(with_pod(spec=[])), "Pod.spec must be an object", id="spec a list"),
    pytest.param(raw(with_pod(status="Running")), "Pod.status", id="status a string"),
    pytest.param(raw(with_pod(spec__containers={})), "Pod.spec.containers", id="containers an object"),
    pytest.param(raw(with_pod(spec__containers="c")), "Pod.spec.containers", id="containers a string"),
    pytest.param(raw(with_pod(spec__containers=[1])), "Pod.spec.containers[0]", id="container a number"),
    pytest.param(
        raw(with_pod(spec__initContainers=[None])), "Pod.spec.initContainers[0]", id="init container null"
    ),
    pytest.param(
        raw(with_pod(spec__initContainers=7)), "Pod.spec.initContainers", id="initContainers a number"
    ),
    pytest.param(
        raw(with_pod(spec__containers__0__resources=[])),
        "Pod.spec.containers[0].resources",
        id="resources a list",
    ),
    pytest.param(
        raw(with_pod(spec__containers__0__resources={"requests": ["cpu"]})),
        "Pod.spec.containers[0].resources.requests",
        id="requests a list",
    ),
    pytest.param(
        raw(with_pod(spec__containers__0__resources={"limits": "1"})),
        "Pod.spec.containers[0].resources.limits",
        id="limits a string",
    ),
    *[
        pytest.param(
            raw(with_pod(spec__containers__0__resources={"requests": {"cpu": q}})),
            "Pod.spec.containers[0].resources.requests.cpu",
            id=f"cpu {label}",
        )
        for label, q in [
            ("abc", "abc"),
            ("1Qi", "1Qi"),
            ("NaN", "NaN"),
            ("inf", "inf"),
            ("Infinity", "Infinity"),
            ("empty", ""),
            ("an object", {"v": 1}),
            ("a list", [1]),
            ("true", True),
            ("null", None),
            ("negative", "-1"),
            ("negative milli", "-0.5m"),
            ("negative number", -3),
            ("negative float", -0.25),
            ("non-ASCII digits", "\u0661\u0662"),
            ("exponent beyond int64", "1e99999999999999999999"),
        ]
    ],
    pytest.param(
        raw(with_pod(spec__initContainers__1__resources={"limits": {"memory": "12 Gi"}})),
        "Pod.spec.initContainers[1].resources.limits.memory",
        id="init container quantity with a space",
    ),
    pytest.param(raw(with_pod(spec__overhead=["cpu"])), "Pod.spec.overhead", id="overhead a list"),
    pytest.param(
        raw(with_pod(spec__overhead={"memory": "-1Gi"})), "Pod.spec.overhead.memory", id="overhead negative"
    ),
    pytest.param(raw(with_pod(spec__resources="big")), "Pod.spec.resources", id="pod resources a string"),
    pytest.param(
        raw(with_pod(spec__resources={"requests": {"cpu": "lots"}})),
        "Pod.spec.resources.requests.cpu",
        id="pod-level request malformed",
    ),
    pytest.param(raw(with_pod(spec__nodeSelector=["a"])), "Pod.spec.nodeSelector", id="nodeSelector a list"),
    pytest.param(
        raw(with_pod(spec__tolerations={"key": "a"})), "Pod.spec.tolerations", id="tolerations an object"
    ),
    pytest.param(raw(with_pod(spec__tolerations=["a"])), "Pod.spec.tolerations[0]", id="toleration a string"),
    pytest.param(raw(with_pod(spec__affinity=[])), "Pod.spec.affinity", id="affinity a list"),
    pytest.param(
        raw(with_pod(spec__affinity__nodeAffinity="x")),
        "Pod.spec.affinity.nodeAffinity",
        id="nodeAffinity a string",
    ),
    pytest.param(
        raw(
            with_pod(
                spec__affinity__nodeAffinity__requiredDuringSchedulingIgnoredDuringExecution__nodeSelectorTerms=[
                    {"matchExpressions": {"key": "a"}}
                ]
            )
        ),
        "nodeSelectorTerms[0].matchExpressions",
        id="matchExpressions an object",
    ),
    pytest.param(
        raw(
            with_pod(
                spec__affinity__podAntiAffinity__requiredDuringSchedulingIgnoredDuringExecution=[
                    {"labelSelector": {"matchLabels": {"role": ["worker"]}}}
                ]
            )
        ),
        "Pod.spec.affinity.podAntiAffinity",
        id="anti-affinity selector value a list",
    ),
    pytest.param(
        raw(with_pod(spec__priorityClassName={"name": "high"})),
        "Pod.spec.priorityClassName",
        id="priorityClassName an object",
    ),
    pytest.param(
        raw(with_pod(spec__schedulingGroup="pg")), "Pod.spec.schedulingGroup", id="schedulingGroup a string"
    ),
    # the node lists
    pytest.param(raw({**filter_doc(), "NodeNames": [1, 2]}), "NodeNames", id="NodeNames numbers"),
    pytest.param(raw({**filter_doc(), "NodeNames": {"a": 1}}), "NodeNames", id="NodeNames an object"),
    pytest.param(raw({"Pod": full_pod(), "Nodes": [], "NodeNames": None}), "Nodes", id="Nodes a list"),
    pytest.param(
        raw({"Pod": full_pod(), "Nodes": {"items": {}}, "NodeNames": None}),
        "Nodes",
        id="Nodes.items an object",
    ),
    pytest.param(
        raw({"Pod": full_pod(), "Nodes": {"items": ["n000"]}, "NodeNames": None}),
        "Nodes.items[0]",
        id="a Node that is a string",
    ),
    pytest.param(
        raw({"Pod": full_pod(), "Nodes": {"items": [{"metadata": []}]}, "NodeNames": None}),
        "Nodes.items[0].metadata",
        id="a Node whose metadata is a list",
    ),
    pytest.param(
        raw({"Pod": full_pod(), "Nodes": {"items": [{"metadata": {"name": 5}}]}, "NodeNames": None}),
        "Nodes.items[0].metadata.name",
        id="a Node whose name is a number",
    ),
    # depth and size
    pytest.param(
        b'{"Pod":{"metadata":{"name":"p","labels":' + nested(1000) + b'}},"NodeNames":[]}',
        "Pod.metadata.labels.a",
        id="labels 1000 levels deep",
    ),
    pytest.param(
        b'{"Pod":{"metadata":{"name":"p"},"spec":{"x":' + nested(600) + b'}},"NodeNames":[]}',
        "nests deeper than 254 levels",
        id="an unread pod field 600 levels deep",
    ),
    pytest.param(
        b'{"Pod":{"metadata":{"name":"p","labels":' + nested(2000) + b'}},"NodeNames":[]}',
        "not valid JSON",
        id="labels 2000 levels deep",
    ),
    pytest.param(
        b'{"Pod":{"metadata":{"name":"p"}},"Nodes":{"items":[{"metadata":{"name":"n000"},"x":'
        + nested(400)
        + b"}]}}",
        "Nodes.items nest deeper",
        id="a Node 400 levels deep",
    ),
    pytest.param(
        b'{"Pod":{"metadata":{"name":"p"},"spec":{"overhead":{"cpu":1e400}}},"NodeNames":[]}',
        "not valid JSON",
        id="a number beyond a double",
    ),
    pytest.param(
        b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["n000"' + b',"n000"' * 10 + b"]",
        "not valid JSON",
        id="truncated body",
    ),
    pytest.param(b'{"Pod":{"metadata":{"name":"\\ud800"}}}', "not valid JSON", id="a lone surrogate"),
    pytest.param(b"\xff\xfe{}", "not valid JSON", id="not UTF-8"),
    pytest.param(b"null", "must be a JSON object", id="null body"),
    pytest.param(b"123456789012345678901234567890", "must be a JSON object", id="a huge number body"),
]


# hostile values echoed in reasons: the reason stays one short line and escapes them
LONG = "x" * 1_000_000
FORGED = "p\nHTTP/1.1 200 OK\r\n\u2028\x85\x1b[31m"
ECHOES = [
    pytest.param(raw(with_pod(metadata__name=7)), id="short"),
    pytest.param(
        raw(with_pod(spec__containers__0__resources={"requests": {"cpu": LONG}})), id="1 MB quantity"
    ),
    pytest.param(
        raw(with_pod(spec__containers__0__resources={"requests": {"cpu": FORGED}})), id="forged quantity"
    ),
    pytest.param(
        raw(with_pod(spec__containers__0__resources={"requests": {LONG: "x"}})), id="1 MB resource name"
    ),
    pytest.param(
        raw(with_pod(spec__containers__0__resources={"requests": {FORGED: "x"}})), id="forged resource name"
    ),
    pytest.param(raw(with_pod(metadata__labels={FORGED * 1000: 1})), id="forged label key"),
    pytest.param(raw(with_pod(metadata__labels={LONG: 1})), id="1 MB label key"),
    pytest.param(
        b'{"Pod":{"metadata":{"name":"p"}}, "NodeNames": [' + b"1" * 500_000 + b"]}", id="huge number"
    ),
]


@pytest.mark.parametrize(("body", "reason"), BAD_FILTER)
@pytest.mark.parametrize("parse", [wire.parse_extender_args], ids=["parse_extender_args"])
def test_every_malformed_filter_body_is_a_wire_error(parse, body, reason):
    with pytest.raises(wire.WireError) as err:
        parse(body)
    assert reason in str(err.value)
    assert_one_short_line(str(err.value))


@pytest.mark.parametrize("body", ECHOES)
def test_echoed_input_is_escaped_and_cut_short(body):
    with pytest.raises(wire.WireError) as err:
        wire.parse_extender_args(body)
    reason = str(err.value)
    assert_one_short_line(reason)
    assert reason.isprintable(), f"unescaped control characters in {reason!r}"


def test_the_quote_helper():
    assert wire.quote("abc") == "'abc'"
    assert wire.quote("a\nb") == "'a\\nb'"
    assert wire.quote("x" * 1000) == "'" + "x" * 200 + "'…"
    assert wire.quote(FORGED).isprintable()
    assert wire.quote([1]) == "an array" and wire.quote({}) == "an object"
    assert wire.quote(None) == "null" and wire.quote(True) == "true"
    assert wire.quote(1e308) == "1e+308"


def test_a_wire_error_is_always_one_bounded_line():
    err = wire.WireError("first\nsecond\r\n" + "y" * 10_000)
    assert_one_short_line(str(err))
    assert str(err).startswith("first\\nsecond\\r\\n")


# ------------------------------------------------------------------ the fast path
@pytest.mark.parametrize(
    "pod",
    [
        {"metadata": []},
        {"metadata": "p"},
        {"metadata": None},
        {"metadata": {"name": ""}},
        {"metadata": {"name": ["p"]}},
        {"metadata": {"name": "p", "namespace": 3}},
        {"metadata": {"name": "p", "uid": {"a": 1}}},
        {"metadata": {"name": "p"}, "spec": {"containers": "main"}},
        {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"requests": {"cpu": "abc"}}}]}},
        {"metadata": {"name": "p", "labels": {"a": ["b"]}}},
        "p",
        [],
    ],
    ids=repr,
)
def test_peek_pod_leaves_a_malformed_pod_to_the_full_parse(pod):
    body = raw({"Pod": pod, "Nodes": None, "NodeNames": ["n000"]})
    assert wire.peek_pod(body) is None
    with pytest.raises(wire.WireError):
        wire.parse_extender_args(body)


def test_peek_pod_reads_a_well_formed_identity():
    pod = full_pod()
    assert wire.peek_pod(raw(filter_doc(pod))) == pod


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"Pod":{},"Nodes":null,"NodeNames":["a","n000"]}', True),
        (b'{"Pod":{},"Nodes":null,"NodeNames":["a","n0000"]}', False),
        (b'{"Pod":{},"Nodes":null,"NodeNames":["a"],"X":["n000"]}', False),
        (b'{"Pod":{"x":{"NodeNames":["n000"]}},"Nodes":null,"NodeNames":["a"]}', False),
        (b'{"Pod":{},"Nodes":{"items":[]},"NodeNames":["n000"]}', False),
        (b'{"Pod":{},"Nodes":null,"NodeNames":["n000"', False),
    ],
)
def test_names_contain_reads_only_the_top_level_node_names(body, expected):
    assert wire.names_contain(body, "n000") is expected


# ------------------------------------------------------------------ preempt
def preempt_doc(**fields: Any) -> bytes:
    return raw({"Pod": full_pod(), **fields})


BAD_PREEMPT = [
    *[
        pytest.param(
            preempt_doc(NodeNameToMetaVictims={"n000": {"Pods": [], "NumPDBViolations": n}}),
            "NodeNameToMetaVictims['n000'].NumPDBViolations",
            id=f"NumPDBViolations {label}",
        )
        for label, n in [
            ("a string", "x"),
            ("1e308", 1e308),
            ("a list", [1]),
            ("true", True),
            ("1.5", 1.5),
            ("negative", -1),
            ("beyond int64", 2**63),
            ("null", None),  # an int64: Go never writes null for it
        ]
    ],
    pytest.param(
        b'{"Pod":{"metadata":{"name":"p"}},"NodeNameToMetaVictims":{"n000":{"NumPDBViolations":1'
        + b"0" * 30
        + b"}}}",
        "NumPDBViolations",
        id="NumPDBViolations beyond uint64",
    ),
    pytest.param(preempt_doc(NodeNameToMetaVictims=[]), "NodeNameToMetaVictims", id="MetaVictims map a list"),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={"n000": None}),
        "NodeNameToMetaVictims['n000']",
        id="MetaVictims null",
    ),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={"n000": [1]}),
        "NodeNameToMetaVictims['n000']",
        id="MetaVictims a list",
    ),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={"n000": {"Pods": {"UID": "u"}}}),
        "NodeNameToMetaVictims['n000'].Pods",
        id="MetaVictims Pods an object",
    ),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={"n000": {"Pods": ["u"]}}),
        "NodeNameToMetaVictims['n000'].Pods[0]",
        id="a MetaPod that is a string",
    ),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={"n000": {"Pods": [{"UID": 5}]}}),
        "NodeNameToMetaVictims['n000'].Pods[0].UID",
        id="a MetaPod UID that is a number",
    ),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={"n000": {"Pods": [1]}}),
        "NodeNameToMetaVictims['n000'].Pods[0]",
        id="Pods: [1]",
    ),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={"n000": {"Pods": [{}]}}),
        "NodeNameToMetaVictims['n000'].Pods[0].UID must name the victim pod (a non-empty string), got null",
        id="Pods: [{}]",
    ),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={"n000": {"Pods": [{"UID": None}]}}),
        "Pods[0].UID must name the victim pod (a non-empty string), got null",
        id="UID: null",
    ),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={"n000": {"Pods": [{"UID": ""}]}}),
        "Pods[0].UID must name the victim pod (a non-empty string), got an empty string",
        id="an empty UID",
    ),
    pytest.param(
        preempt_doc(NodeNameToVictims={"n000": {"Pods": [{}]}}),
        "NodeNameToVictims['n000'].Pods[0].metadata",
        id="a full victim without metadata",
    ),
    pytest.param(
        preempt_doc(NodeNameToVictims={"n000": {"Pods": [{"metadata": {"name": "v"}}]}}),
        "NodeNameToVictims['n000'].Pods[0].metadata.uid must name the victim pod",
        id="a full victim without a uid",
    ),
    pytest.param(preempt_doc(NodeNameToVictims="n000"), "NodeNameToVictims", id="Victims map a string"),
    pytest.param(
        preempt_doc(NodeNameToVictims={"n000": {"Pods": [{"metadata": []}]}}),
        "NodeNameToVictims['n000'].Pods[0].metadata",
        id="a victim whose metadata is a list",
    ),
    pytest.param(
        preempt_doc(NodeNameToVictims={"n000": {"Pods": [{"metadata": {"uid": ["u"]}}]}}),
        "NodeNameToVictims['n000'].Pods[0].metadata.uid",
        id="a victim whose uid is a list",
    ),
    pytest.param(
        preempt_doc(NodeNameToVictims={"n000": {"Pods": [7]}}),
        "NodeNameToVictims['n000'].Pods[0]",
        id="a victim that is a number",
    ),
    pytest.param(
        preempt_doc(NodeNameToVictims={"n000": {"Pods": [], "NumPDBViolations": "2"}}),
        "NodeNameToVictims['n000'].NumPDBViolations",
        id="Victims NumPDBViolations a string",
    ),
    pytest.param(
        preempt_doc(NodeNameToMetaVictims={FORGED: {"Pods": [{"UID": 5}]}}),
        "Pods[0].UID",
        id="a forged node name",
    ),
    pytest.param(
        raw({"Pod": with_pod(metadata=[])["Pod"], "NodeNameToMetaVictims": {}}),
        "Pod.metadata must be an object",
        id="the preemptor's metadata a list",
    ),
    pytest.param(
        raw(
            {
                "Pod": with_pod(spec__containers__0__resources={"requests": {"cpu": "abc"}})["Pod"],
                "NodeNameToMetaVictims": {},
            }
        ),
        "Pod.spec.containers[0].resources.requests.cpu",
        id="the preemptor's quantity malformed",
    ),
]


@pytest.mark.parametrize(("body", "reason"), BAD_PREEMPT)
def test_every_malformed_preempt_body_is_a_wire_error(body, reason):
    with pytest.raises(wire.WireError) as err:
        wire.parse_preemption_args(body)
    assert reason in str(err.value)
    assert_one_short_line(str(err.value))


def test_well_formed_victims_in_both_modes():
    meta = wire.parse_preemption_args(
        preempt_doc(
            NodeNameToMetaVictims={
                "n000": {"Pods": [{"UID": "a"}, {"uid": "b"}], "NumPDBViolations": 2},
                "n001": {"Pods": None},
            }
        )
    )
    assert meta.victims == {
        "n000": {"Pods": [{"UID": "a"}, {"UID": "b"}], "NumPDBViolations": 2},
        "n001": {"Pods": [], "NumPDBViolations": 0},
    }
    full = wire.parse_preemption_args(
        preempt_doc(NodeNameToVictims={"n000": {"Pods": [full_pod()], "NumPDBViolations": 2**63 - 1}})
    )
    assert full.victims == {
        "n000": {"Pods": [{"UID": full_pod()["metadata"]["uid"]}], "NumPDBViolations": 2**63 - 1}
    }


def test_absent_go_fields_are_their_zero_values():
    """Absent is what Go's decoder reads as the zero value; only null, which Go never writes for a
    string or an int64, is refused."""
    args = wire.parse_binding_args(raw({"PodName": "p", "PodNamespace": "ml", "Node": "n000"}))
    assert (args.pod_name, args.pod_namespace, args.pod_uid, args.node) == ("p", "ml", "", "n000")
    args = wire.parse_binding_args(raw({"podname": "p", "podNamespace": "ml", "poduid": "u", "NODE": "n"}))
    assert (args.pod_uid, args.node) == ("u", "n")
    meta = wire.parse_preemption_args(preempt_doc(NodeNameToMetaVictims={"n000": {"Pods": [{"UID": "a"}]}}))
    assert meta.victims["n000"]["NumPDBViolations"] == 0


@pytest.mark.parametrize("field", ["PodName", "PodNamespace", "PodUID", "Node"])
def test_a_null_bind_field_is_a_wire_error(field):
    doc = {"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "n000", field: None}
    with pytest.raises(wire.WireError, match=f"{field} must be a string, got null"):
        wire.parse_binding_args(raw(doc))


# ------------------------------------------------------------------ what still parses
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(filter_doc(), id="the full pod"),
        pytest.param(with_pod(spec__containers__0__resources={"requests": {"cpu": "-0"}}), id="minus zero"),
        pytest.param(
            with_pod(spec__containers__0__resources={"requests": {"cpu": 2}}), id="a number quantity"
        ),
        pytest.param(
            with_pod(spec__containers__0__resources={"requests": {"cpu": "1e40"}}), id="a huge quantity"
        ),
        pytest.param(with_pod(spec__containers__0__resources=None), id="null resources"),
        pytest.param(with_pod(metadata__labels=None, spec__tolerations=None), id="null maps and lists"),
        pytest.param(with_pod(spec=None), id="no spec"),
        pytest.param({"Pod": full_pod(), "Nodes": None, "NodeNames": ["n000", "n000"]}, id="duplicate names"),
        pytest.param(
            {
                "Pod": full_pod(),
                "Nodes": {"items": [make_node("n000"), make_node("n000")]},
                "NodeNames": None,
            },
            id="full nodes with a duplicate",
        ),
    ],
)
def test_well_formed_bodies_still_parse(doc):
    args = wire.parse_extender_args(raw(doc))
    assert args.pod == doc["Pod"]


# ------------------------------------------------------------------ through the HTTP app
@pytest.mark.parametrize(("body", "reason"), BAD_FILTER)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_malformed_filter_bodies_are_400_over_http(make_service, verb, body, reason):
    svc = await make_service()
    status, text = await svc.post(verb, raw=body)
    assert status == 400, text
    assert reason in text.decode()
    assert text.endswith(b"\n")
    assert_one_short_line(text.decode().removesuffix("\n"))


@pytest.mark.parametrize("body", ECHOES)
async def test_echoes_are_one_short_line_over_http(make_service, body):
    svc = await make_service()
    status, text = await svc.post("filter", raw=body)
    assert status == 400
    assert_one_short_line(text.decode().removesuffix("\n"))


@pytest.mark.parametrize(("body", "reason"), BAD_PREEMPT)
async def test_malformed_preempt_bodies_are_400_over_http(make_service, body, reason):
    svc = await make_service()
    status, text = await svc.post("preempt", raw=body)
    assert status == 400, text
    assert reason in text.decode()
    assert_one_short_line(text.decode().removesuffix("\n"))


async def test_a_malformed_pod_skips_the_fast_path(make_service):
    """The filter fast path reads the Pod before anything else; a malformed one falls to the parse."""
    svc = await make_service()
    for pod in (
        {"metadata": []},
        {"metadata": "p"},
        {"metadata": {"name": "p", "uid": 1}},
        {"metadata": {"name": "p"}, "spec": {"containers": {}}},
    ):
        status, text = await svc.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": ["n000"]})
        assert status == 400, text
        assert_one_short_line(text.decode().removesuffix("\n"))


# ------------------------------------------------------------------ fuzz
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "-1", "1e999", "100m", "\n", "1Qi", "NaN", "x" * 400]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


def _paths(node: Any, path: tuple = ()) -> list[tuple]:
    """Every place in a document a value sits, the root excluded."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        out.append((*path, k))
        out.extend(_paths(v, (*path, k)))
    return out


def _mutate(doc: Any, data: st.DataObject) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = _paths(doc)
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and data.draw(st.booleans(), label="delete"):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(JSON_VALUES, label="value")
    return doc


FULL_MODE = {"Pod": full_pod(), "Nodes": {"metadata": {}, "items": [make_node("n000")]}, "NodeNames": None}
PREEMPT = {
    "Pod": full_pod(),
    "NodeNameToMetaVictims": {"n000": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 1}},
    "NodeNameToVictims": {"n001": {"Pods": [full_pod()], "NumPDBViolations": 0}},
}
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _parse_or_wire_error(parse, body: bytes) -> None:
    try:
        parse(body)
    except wire.WireError as exc:
        assert_one_short_line(str(exc))
        assert str(exc).isprintable()


@FUZZ
@given(data=st.data())
def test_fuzzed_filter_bodies_parse_or_are_wire_errors(data):
    doc = _mutate(filter_doc(), data)
    body = raw(doc)
    _parse_or_wire_error(wire.parse_extender_args, body)
    peeked = wire.peek_pod(body)
    if peeked is not None:  # what the fast path reads is checked as fully as the parse checks it
        wire.parse_extender_args(raw({"Pod": peeked, "NodeNames": []}))


@FUZZ
@given(data=st.data())
def test_fuzzed_full_mode_filter_bodies_parse_or_are_wire_errors(data):
    _parse_or_wire_error(wire.parse_extender_args, raw(_mutate(FULL_MODE, data)))


@FUZZ
@given(data=st.data())
def test_fuzzed_preempt_bodies_parse_or_are_wire_errors(data):
    _parse_or_wire_error(wire.parse_preemption_args, raw(_mutate(PREEMPT, data)))


# ------------------------------------------------------------------ fuzz through the service
class _Errors(logging.Handler):
    """ERROR records logged while a request runs: an internal fault the reply may not show."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def live_service():
    """One service for every fuzzed request (a sync fixture: hypothesis drives the examples)."""
    loop = asyncio.new_event_loop()
    app = build_app(default_settings(), source=EmbeddedCluster(rack_cluster()))
    client = TestClient(TestServer(app), loop=loop)
    loop.run_until_complete(client.start_server())
    errors = _Errors()
    logging.getLogger("extender").addHandler(errors)

    def post(verb: str, body: bytes) -> tuple[int, bytes]:
        async def call() -> tuple[int, bytes]:
            resp = await client.post(f"/{verb}", data=body, headers={"Content-Type": "application/json"})
            return resp.status, await resp.read()

        return loop.run_until_complete(call())

    def healthz() -> int:
        async def call() -> int:
            return (await client.get("/healthz")).status

        return loop.run_until_complete(call())

    post.healthz = healthz  # type: ignore[attr-defined]
    yield post, errors
    logging.getLogger("extender").removeHandler(errors)
    loop.run_until_complete(client.close())
    loop.close()


SERVICE_FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.mark.parametrize(
    ("verb", "base"),
    [
        ("filter", filter_doc()),
        ("prioritize", filter_doc()),
        ("filter", FULL_MODE),
        ("preempt", PREEMPT),
        ("bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "u-1", "Node": "n000"}),
    ],
    ids=["filter", "prioritize", "filter-full-nodes", "preempt", "bind"],
)
@SERVICE_FUZZ
@given(data=st.data())
def test_fuzzed_bodies_never_reach_the_scheduler_malformed(live_service, verb, base, data):
    """What the wire layer lets through, the scheduling code handles: a reply or a 400, never a
    500, an internal error in the reply, or an error logged."""
    post, errors = live_service
    body = raw(_mutate(base, data))
    seen = len(errors.records)
    status, reply = post(verb, body)
    assert status in (200, 400), (status, reply[:300])
    if status == 400:
        assert_one_short_line(reply.decode().removesuffix("\n"))
    elif verb == "filter":
        assert orjson.loads(reply)["Error"] == "", reply[:300]
    assert len(errors.records) == seen, errors.records[-1].getMessage()
    assert post.healthz() == 200


@pytest.mark.parametrize("name", [FORGED, LONG, FORGED * 1000], ids=["forged", "1 MB", "long forged"])
async def test_unknown_hostile_node_names_are_a_one_line_400(make_service, name):
    """NodeNames are not checked one by one at the wire layer; the scheduler refuses unknown ones."""
    svc = await make_service()
    status, text = await svc.post("filter", filter_doc() | {"NodeNames": ["n000", name, name]})
    assert status == 400
    reason = text.decode().removesuffix("\n")
    assert len(reason.splitlines()) == 1 and reason.isprintable()
    assert len(reason) < 2000


# ------------------------------------------------------------------ compressed bodies
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "x-unknown"])
@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind", "preempt"])
async def test_a_garbage_compressed_body_is_a_one_line_400(make_service, verb, encoding):
    """kube-scheduler never compresses; a body claiming an encoding it does not decode to is refused
    with a reason, and the service stays healthy."""
    svc = await make_service()
    resp = await svc.client.post(
        f"/{verb}",
        data=b"\x1f\x8b\x08\x00garbage, not " + encoding.encode(),
        headers={"Content-Type": "application/json", "Content-Encoding": encoding},
    )
    text = (await resp.read()).decode(errors="replace")
    assert resp.status == 400, (resp.status, text[:300])
    assert_one_short_line(text.removesuffix("\n"))
    health = await svc.client.get("/healthz")
    assert health.status == 200


async def test_a_well_formed_gzip_body_is_read(make_service):
    svc = await make_service()
    resp = await svc.client.post(
        "/filter",
        data=gzip.compress(orjson.dumps(filter_doc())),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert resp.status == 200, await resp.text()
    assert orjson.loads(await resp.read())["NodeNames"]


async def test_a_gzip_bomb_stops_at_the_body_limit(make_service):
    """The limit counts decompressed bytes: 70 MiB of zeros sent as 70 KiB of gzip is refused."""
    svc = await make_service()
    bomb = gzip.compress(b'{"Pod": ' + b" " * (70 * 2**20) + b"}")
    assert len(bomb) < 2**20
    resp = await svc.client.post(
        "/filter", data=bomb, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    text = (await resp.read()).decode()
    assert resp.status == 400 and "larger than --max-body-bytes" in text, text[:300]
    assert (await svc.client.get("/healthz")).status == 200


async def test_preempt_refuses_unknown_nodes_and_never_returns_a_node_without_victims(make_service):
    svc = await make_service()
    victim = svc.cluster.apply(make_pod("v", node="n000"))
    pod = svc.cluster.apply(make_pod("p"))
    uid = victim["metadata"]["uid"]
    status, text = await svc.post(
        "preempt", {"Pod": pod, "NodeNameToMetaVictims": {"ghost\\nnode": {"Pods": [{"UID": uid}]}}}
    )
    assert status == 400 and "unknown to the extender's cluster cache" in text.decode()
    assert_one_short_line(text.decode().removesuffix("\n"))
    status, body = await svc.post(
        "preempt",
        {"Pod": pod, "NodeNameToMetaVictims": {"n000": {"Pods": [{"UID": uid}]}, "n001": {"Pods": []}}},
    )
    assert status == 200
    assert set(orjson.loads(body)["NodeNameToMetaVictims"]) == {"n000"}


# ------------------------------------------------------------------ numbers past int64 in Queues
def _kai_queue(name: str, **res: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": res},
    }


async def test_queue_amounts_past_int64_are_shown_saturated_not_a_500(make_service):
    """1e14 MB is 10**20 bytes: /debug/queues answered 500 (orjson encodes int64 at most); a weight past
    float64 broke /metrics too. Each saturates, and both pages answer."""
    svc = await make_service(
        [
            *rack_cluster(),
            _kai_queue(
                "default-queue",
                memory={"quota": 1e14, "limit": -1},
                cpu={"quota": -1, "limit": -1, "overQuotaWeight": "1e400"},
            ),
            _kai_queue("huge-limit", gpu={"quota": 0, "limit": "1e25"}),
        ]
    )
    resp = await svc.client.get("/debug/queues")
    assert resp.status == 200, (await resp.text())[:300]
    doc = {q["queue"]: q for q in (await resp.json())["queues"]}
    memory = doc["default-queue"]["resources"]["memory"]
    assert 2**60 <= memory["quota"] < 2**63 and memory["limit"] is None
    assert doc["huge-limit"]["resources"]["gpu"]["limit"] >= 2**60
    assert (await svc.client.get("/metrics")).status == 200
    pod = svc.cluster.apply(make_pod("p"))
    status, body = await svc.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": ["n000"]})
    assert status == 200 and orjson.loads(body)["NodeNames"] == ["n000"], body
