"""KubeClusterSource's error handling against a scripted HTTP fake: what is retried, what is reported.

The real-server behaviour is in test_kube_source.py; this covers answers a healthy apiserver rarely
gives on cue (5xx, 429, dropped connections).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web

from extender.state.kube import KubeClusterSource, KubeSettings
from extender.state.source import BindError

FAST = KubeSettings(write_attempts=3, write_backoff_s=0.001, backoff_initial_s=0.001, backoff_max_s=0.002)


class Script:
    """Answers per path, in order; the last answer repeats. Records every request."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], list[tuple[int, Any]]] = {}
        self.seen: list[tuple[str, str]] = []
        self.queries: list[tuple[str, dict[str, str]]] = []

    def on(self, method: str, path: str, *answers: tuple[int, Any]) -> None:
        self.answers[(method, path)] = list(answers)

    async def handle(self, request: web.Request) -> web.Response:
        key = (request.method, request.path + ("?watch" if request.query.get("watch") else ""))
        self.seen.append(key)
        self.queries.append((key[1], dict(request.query)))
        queue = self.answers.get(key) or [(404, {"kind": "Status", "message": f"{request.path} not found"})]
        status, body = queue.pop(0) if len(queue) > 1 else queue[0]
        if status == -1:  # drop the connection mid-request
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)
        raw = body if isinstance(body, bytes) else orjson.dumps(body)
        return web.Response(status=status, body=raw, content_type="application/json")


@pytest.fixture
async def fake(tmp_path: Path) -> AsyncIterator[tuple[Script, str]]:
    script = Script()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", script.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "f", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "f", "context": {"cluster": "f", "user": "u"}}],
                "current-context": "f",
            }
        )
    )
    yield script, str(kubeconfig)
    await runner.cleanup()


BIND = "/api/v1/namespaces/ns/pods/p/binding"
POD = "/api/v1/namespaces/ns/pods/p"
BUSY = (500, {"kind": "Status", "message": "etcd busy"})
SLOW_DOWN = (429, {"kind": "Status", "message": "too many requests"})
CREATED = (201, {"kind": "Status", "status": "Success"})
CONFLICT = (409, {"kind": "Status", "reason": "Conflict", "message": "pod p is already assigned to node"})


@pytest.mark.parametrize(
    ("answers", "pod_node", "error"),
    [
        ([CREATED], None, None),
        ([BUSY, SLOW_DOWN, CREATED], None, None),
        ([(-1, None), CREATED], None, None),
        ([CONFLICT], "n1", None),
        ([CONFLICT], "n2", "already bound to n2, not n1"),
        ([CONFLICT], "n1:other-uid", "was deleted and recreated"),
        ([BUSY, BUSY, BUSY], None, "etcd busy"),
        ([(400, {"kind": "Status", "message": "bad binding"})], None, "bad binding"),
    ],
    ids=[
        "a 201 is a bind",
        "5xx and 429 are retried until the bind lands",
        "a dropped connection is retried",
        "a 409 for a pod already on the same node is success",
        "a 409 for a pod on another node is an error naming that node",
        "a 409 for a pod recreated under the same name is an error, even on the same node",
        "retries are bounded and the last error is reported",
        "a 400 is reported at once with the server's message",
    ],
)
async def test_bind_outcomes(
    fake: tuple[Script, str], answers: list[tuple[int, Any]], pod_node: str | None, error: str | None
) -> None:
    script, kubeconfig = fake
    script.on("POST", BIND, *answers)
    node, _, uid = (pod_node or "").partition(":")
    script.on("GET", POD, (200, {"metadata": {"uid": uid or "u"}, "spec": {"nodeName": node or None}}))
    source = KubeClusterSource(kubeconfig, settings=FAST)
    try:
        if error is None:
            await source.bind_pod(namespace="ns", name="p", uid="u", node="n1")
        else:
            with pytest.raises(BindError, match=error):
                await source.bind_pod(namespace="ns", name="p", uid="u", node="n1")
    finally:
        await source.close()
    assert script.seen.count(("POST", BIND)) == min(len(answers), FAST.write_attempts)


async def test_a_refused_status_write_is_reported_not_raised(fake: tuple[Script, str]) -> None:
    script, kubeconfig = fake
    script.on("PATCH", POD + "/status", (422, {"kind": "Status", "message": "invalid condition"}))
    source = KubeClusterSource(kubeconfig, settings=FAST)
    try:
        await source.set_pod_condition(namespace="ns", name="p", condition={"type": "X", "status": "False"})
    finally:
        await source.close()
    assert script.seen == [("PATCH", POD + "/status")], "a 422 is not retried"


async def test_watch_error_410_relists(fake: tuple[Script, str]) -> None:
    script, kubeconfig = fake
    script.on("GET", "/apis", (200, {"groups": []}))
    script.on("GET", "/api/v1", (200, {"resources": [{"name": "nodes"}, {"name": "pods"}]}))
    node_list = {"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "n1"}}]}
    script.on("GET", "/api/v1/nodes", (200, node_list))
    script.on("GET", "/api/v1/pods", (200, {"metadata": {"resourceVersion": "5"}, "items": []}))

    class Store:
        def __init__(self) -> None:
            self.lists: list[tuple[str, str, list[str]]] = []

        def upsert(self, obj: dict[str, Any]) -> None: ...

        def remove(self, obj: dict[str, Any]) -> None: ...

        def replace_all(self, group: str, kind: str, objs: list[dict[str, Any]]) -> None:
            assert all(o["apiVersion"] == "v1" and o["kind"] == kind for o in objs)
            self.lists.append((group, kind, [o["metadata"]["name"] for o in objs]))

    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    script.on("GET", "/api/v1/nodes?watch", (200, orjson.dumps(gone) + b"\n"), (200, b""))
    script.on("GET", "/api/v1/pods?watch", (200, b"not json\n"), (200, b""))
    store = Store()
    source = KubeClusterSource(kubeconfig, settings=FAST, _iterations=2)
    await source.run(store)
    assert source.is_synced()
    assert store.lists.count(("", "Node", ["n1"])) == 2, "the 410 on the node watch made it relist"
    assert store.lists.count(("", "Pod", [])) == 1, "a garbled watch line reconnects from the same version"


async def test_a_watch_broken_mid_stream_resumes_after_the_last_event_applied(
    fake: tuple[Script, str],
) -> None:
    script, kubeconfig = fake
    script.on("GET", "/apis", (200, {"groups": []}))
    script.on("GET", "/api/v1", (200, {"resources": [{"name": "pods"}]}))
    script.on("GET", "/api/v1/pods", (200, {"metadata": {"resourceVersion": "5"}, "items": []}))
    event = {
        "type": "ADDED",
        "object": {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7"}},
    }
    script.on("GET", "/api/v1/pods?watch", (200, orjson.dumps(event) + b"\nnot json\n"), (200, b""))

    class Store:
        def __init__(self) -> None:
            self.upserts: list[str] = []

        def upsert(self, obj: dict[str, Any]) -> None:
            self.upserts.append(obj["metadata"]["resourceVersion"])

        def remove(self, obj: dict[str, Any]) -> None: ...

        def replace_all(self, group: str, kind: str, objs: list[dict[str, Any]]) -> None: ...

    store = Store()
    source = KubeClusterSource(kubeconfig, settings=FAST, _iterations=2)
    await source.run(store)
    watches = [q["resourceVersion"] for path, q in script.queries if path.endswith("?watch")]
    assert watches == ["5", "7"], "the second watch starts after the event the first one applied"
    assert store.upserts == ["7"], "nothing was replayed"
