"""kube-scheduler's extender v1 wire protocol, in both nodeCacheCapable modes, key by key."""

from __future__ import annotations

import orjson
import pytest

from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod, rack_cluster

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def args_names(pod, names):
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def args_full(pod, nodes):
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}


async def test_filter_in_names_mode_answers_every_key_with_go_types(make_service):
    svc = await make_service()
    pod = svc.cluster.apply(make_pod("p", cpu="1"))
    status, body = await svc.post("filter", args_names(pod, ["n000", "n001"]))
    assert status == 200
    doc = orjson.loads(body)
    assert set(doc) == FILTER_KEYS
    assert doc["Nodes"] is None
    assert isinstance(doc["NodeNames"], list) and set(doc["NodeNames"]) == {"n000", "n001"}
    assert doc["FailedNodes"] == {} and doc["FailedAndUnresolvableNodes"] == {}
    assert doc["Error"] == ""


async def test_filter_in_full_nodes_mode_returns_the_passing_node_objects(make_service):
    nodes = [make_node("big", cpu="8"), make_node("small", cpu="1")]
    svc = await make_service(nodes)
    pod = svc.cluster.apply(make_pod("p", cpu="2"))
    status, body = await svc.post("filter", args_full(pod, nodes))
    doc = orjson.loads(body)
    assert status == 200 and set(doc) == FILTER_KEYS
    assert doc["NodeNames"] is None
    assert [n["metadata"]["name"] for n in doc["Nodes"]["items"]] == ["big"]
    # when some nodes pass, the rejected ones are left out (they count as unresolvable): listing
    # them costs kube-scheduler a map decode and preemption is not run for a schedulable pod
    assert doc["FailedNodes"] == {}


async def test_filter_rejects_with_a_reason_when_nothing_fits(make_service):
    svc = await make_service([make_node("a", cpu="1")])
    pod = svc.cluster.apply(make_pod("p", cpu="4"))
    _, body = await svc.post("filter", args_names(pod, ["a"]))
    doc = orjson.loads(body)
    assert doc["NodeNames"] == []
    assert doc["FailedNodes"]["a"].startswith("pod default/p: no offered node has room")
    assert "cpu short 3000m" in doc["FailedNodes"]["a"]
    assert doc["FailedAndUnresolvableNodes"] == {}  # preemption could help a single pod


async def test_filter_with_no_node_lists_passes_nothing(make_service):
    svc = await make_service()
    pod = svc.cluster.apply(make_pod("p"))
    status, body = await svc.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": None})
    assert status == 200
    assert orjson.loads(body)["NodeNames"] == []


async def test_prioritize_is_a_bare_array_of_host_and_score_in_range(make_service):
    nodes = [make_node("busy", cpu="8"), make_node("idle", cpu="8")]
    svc = await make_service(nodes)
    svc.cluster.apply(make_pod("filler", cpu="6", node="busy"))
    pod = svc.cluster.apply(make_pod("p", cpu="1"))
    status, body = await svc.post("prioritize", args_names(pod, ["busy", "idle"]))
    doc = orjson.loads(body)
    assert status == 200 and isinstance(doc, list)
    assert all(
        set(e) == {"Host", "Score"} and isinstance(e["Score"], int) and 0 <= e["Score"] <= 10 for e in doc
    )
    scores = {e["Host"]: e["Score"] for e in doc}
    assert scores["busy"] > scores["idle"]  # most-allocated first: bin-packing


async def test_bind_sets_the_node_and_answers_an_empty_error(make_service):
    svc = await make_service()
    pod = svc.cluster.apply(make_pod("p"))
    status, body = await svc.post(
        "bind", {"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "n001"}
    )
    assert status == 200 and orjson.loads(body) == {"Error": ""}
    assert svc.cluster.get("", "Pod", "default", "p")["spec"]["nodeName"] == "n001"
    # idempotent: the same binding again is success
    status, body = await svc.post(
        "bind", {"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "n001"}
    )
    assert orjson.loads(body) == {"Error": ""}
    status, body = await svc.post(
        "bind", {"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"], "Node": "n002"}
    )
    assert "already bound to n001" in orjson.loads(body)["Error"]


async def test_preempt_always_answers_meta_victims(make_service):
    svc = await make_service()
    victim = svc.cluster.apply(make_pod("v", node="n000"))
    pod = svc.cluster.apply(make_pod("p"))
    uid = victim["metadata"]["uid"]
    full = {
        "Pod": pod,
        "NodeNameToVictims": {"n000": {"Pods": [victim], "NumPDBViolations": 0}},
        "NodeNameToMetaVictims": None,
    }
    meta = {
        "Pod": pod,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {"n000": {"Pods": [{"UID": uid}], "NumPDBViolations": 1}},
    }
    for doc, violations in ((full, 0), (meta, 1)):
        status, body = await svc.post("preempt", doc)
        assert status == 200
        assert orjson.loads(body) == {
            "NodeNameToMetaVictims": {"n000": {"Pods": [{"UID": uid}], "NumPDBViolations": violations}}
        }


async def test_health_readiness_and_metrics(make_service):
    svc = await make_service()
    assert (await svc.client.get("/healthz")).status == 200
    for _ in range(200):
        resp = await svc.client.get("/readyz")
        if resp.status == 200:
            break
        await __import__("asyncio").sleep(0.05)
    assert resp.status == 200
    pod = svc.cluster.apply(make_pod("p"))
    await svc.post("filter", args_names(pod, ["n000"]))
    text = await (await svc.client.get("/metrics")).text()
    assert 'gang_extender_requests_total{code="200",verb="filter"} 1.0' in text
    assert "gang_extender_request_seconds_bucket" in text
    assert 'gang_extender_cache_objects{cache="nodes"} 8.0' in text


BAD_INPUT = [
    pytest.param(b"", "empty request body", id="an empty body"),
    pytest.param(b"{not json", "not valid JSON", id="malformed JSON"),
    pytest.param(b"[1, 2]", "must be a JSON object", id="an array instead of an object"),
    pytest.param(b'{"NodeNames": ["n000"]}', "missing Pod", id="a missing Pod"),
    pytest.param(b'{"Pod": "p", "NodeNames": []}', "Pod must be an object", id="a Pod of the wrong type"),
    pytest.param(
        b'{"Pod": {"metadata": {}}, "NodeNames": []}', "Pod.metadata.name", id="a Pod without a name"
    ),
    pytest.param(
        b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "n000"}',
        "NodeNames must be an array",
        id="NodeNames not a list",
    ),
    pytest.param(
        b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["ghost-1", "n000"]}',
        "unknown to the extender's cluster cache: 'ghost-1'",
        id="a node name the service does not know",
    ),
    pytest.param(
        b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": '
        b'[{"resources": {"requests": {"cpu": "lots"}}}]}}, "NodeNames": ["n000"]}',
        "spec.containers[0].resources.requests.cpu",
        id="a pod with a malformed quantity",
    ),
]


@pytest.mark.parametrize(("body", "reason"), BAD_INPUT)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
async def test_bad_filter_input_is_400_with_a_one_line_reason(make_service, verb, body, reason):
    svc = await make_service()
    status, text = await svc.post(verb, raw=body)
    assert status == 400
    assert reason in text.decode()
    assert text.decode().count("\n") == 1
    # the service is still healthy afterwards
    pod = svc.cluster.apply(make_pod("p"))
    status, _ = await svc.post(verb, args_names(pod, ["n000"]))
    assert status == 200


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"PodName": "p", "PodNamespace": "default"}', "missing Node"),
        (b'{"PodName": 3, "PodNamespace": "default", "Node": "n"}', "PodName must be a string"),
        (b"nope", "not valid JSON"),
        (
            b'{"PodName": "p", "PodNamespace": "default", "PodUID": null, "Node": "n"}',
            "PodUID must be a string",
        ),
        (b'{"PodName": null, "PodNamespace": "default", "Node": "n"}', "PodName must be a string, got null"),
        (b'{"PodName": "p", "PodNamespace": "default", "Node": null}', "Node must be a string, got null"),
        (b'{"PodName": "p", "PodNamespace": null, "Node": "n"}', "PodNamespace must be a string, got null"),
    ],
    ids=[
        "bind without a node",
        "bind with a number for a name",
        "bind with garbage",
        "bind with a null PodUID",
        "bind with a null PodName",
        "bind with a null Node",
        "bind with a null PodNamespace",
    ],
)
async def test_bad_bind_input_is_400(make_service, body, reason):
    svc = await make_service()
    status, text = await svc.post("bind", raw=body)
    assert status == 400 and reason in text.decode()


async def test_an_internal_fault_in_preempt_vetoes_every_node_and_is_counted(
    make_service, caplog, monkeypatch
):
    """The preempt reply has no Error field: a 500 would make kube-scheduler fail the pod's PostFilter
    (or, were the extender ignorable, preempt without it, breaking gangs). An empty victims map is the
    answer that evicts no one: kube-scheduler drops every candidate and retries the pod later."""
    svc = await make_service([*rack_cluster(), make_kai_podgroup("urgent", min_member=2)])
    victim = svc.cluster.apply(make_pod("v", node="n000"))
    pods = [gang_pod(f"urgent-{i}", "urgent") for i in range(2)]
    for pod in pods:
        pod["spec"]["priority"] = 1000
        svc.cluster.apply(pod)
    pod = svc.cluster.get("", "Pod", "default", "urgent-0")

    def broken(*_a, **_k):
        raise RuntimeError("gang default/urgent: cannot plan while its release binds are in flight")

    monkeypatch.setattr(svc.scheduler.ledger, "plan", broken)  # reached through the gang preemptor
    doc = {
        "Pod": pod,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "n000": {"Pods": [{"UID": victim["metadata"]["uid"]}], "NumPDBViolations": 0}
        },
    }
    status, body = await svc.post("preempt", doc)
    assert status == 200, body
    assert orjson.loads(body) == {"NodeNameToMetaVictims": {}}
    assert any(r.getMessage().startswith("preempt failed for pod default/urgent-0") for r in caplog.records)
    text = await (await svc.client.get("/metrics")).text()
    assert 'gang_extender_internal_errors_total{verb="preempt"} 1.0' in text
    assert 'gang_extender_requests_total{code="200",verb="preempt"} 1.0' in text
    assert svc.cluster.get("", "Pod", "default", "v") is not None  # no one evicted


async def test_an_oversize_body_is_400_naming_the_limit(make_service):
    svc = await make_service(server_max_body_bytes=2048)
    pod = make_pod("p")
    status, text = await svc.post("filter", args_names(pod, ["n000"] * 1000))
    assert status == 400
    assert "--max-body-bytes (2048 bytes)" in text.decode()


async def test_bind_of_an_unknown_pod_answers_in_the_error_field(make_service):
    svc = await make_service(rack_cluster())
    status, body = await svc.post(
        "bind", {"PodName": "ghost", "PodNamespace": "default", "PodUID": "", "Node": "n000"}
    )
    assert status == 200
    assert "not in the extender's cache" in orjson.loads(body)["Error"]


async def test_an_internal_fault_answers_in_the_error_field_and_logs_the_pod(
    make_service, caplog, monkeypatch
):
    svc = await make_service()
    pod = svc.cluster.apply(make_pod("p", namespace="ml"))

    def broken(*args, **kwargs):
        raise RuntimeError("placement state is inconsistent")

    monkeypatch.setattr(svc.scheduler, "filter", broken)
    monkeypatch.setattr(svc.scheduler, "plain_refusals", broken)  # the plain pods' path falls back
    status, body = await svc.post("filter", args_names(pod, ["n000"]))
    assert status == 200
    doc = orjson.loads(body)
    assert set(doc) == FILTER_KEYS
    assert doc["Error"] == "internal error in gang-extender filter: placement state is inconsistent"
    assert any("plain filter failed for pod ml/p" in r.getMessage() for r in caplog.records)
    assert any(r.getMessage().startswith("filter failed for pod ml/p") for r in caplog.records)
    text = await (await svc.client.get("/metrics")).text()
    assert 'gang_extender_internal_errors_total{verb="filter"} 1.0' in text
    monkeypatch.setattr(svc.scheduler, "bind", broken)
    status, body = await svc.post(
        "bind", {"PodName": "p", "PodNamespace": "ml", "PodUID": pod["metadata"]["uid"], "Node": "n000"}
    )
    assert status == 200 and "internal error in gang-extender bind" in orjson.loads(body)["Error"]
