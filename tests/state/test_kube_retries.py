"""KubeClusterSource's error handling against a scripted HTTP fake: what is retried, what is reported.

The real-server behaviour is in test_kube_source.py; this covers answers a healthy apiserver rarely
gives on cue (5xx, 429, dropped connections).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web

from extender.state import nesting
from extender.state.kube import KubeClusterSource, KubeSettings
from extender.state.source import BindError, EvictionFailed, EvictionUnanswered, SourceFatalError
from extender.state.store import ClusterStore

FAST = KubeSettings(write_attempts=3, write_backoff_s=0.001, backoff_initial_s=0.001, backoff_max_s=0.002)


class Script:
    """Answers per path, in order; the last answer repeats. Records every request."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], list[tuple[int, Any]]] = {}
        self.seen: list[tuple[str, str]] = []
        self.queries: list[tuple[str, dict[str, str]]] = []
        self.bodies: list[tuple[str, bytes]] = []  # (path, body) of every write

    def on(self, method: str, path: str, *answers: tuple[int, Any]) -> None:
        self.answers[(method, path)] = list(answers)

    async def handle(self, request: web.Request) -> web.Response:
        key = (request.method, request.path + ("?watch" if request.query.get("watch") else ""))
        self.seen.append(key)
        self.queries.append((key[1], dict(request.query)))
        if request.method in ("POST", "PATCH"):
            self.bodies.append((request.path, await request.read()))
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


DROPPED = (-1, None)  # the connection cut as the API server dies: the POST may or may not have landed
FORBIDDEN = (403, {"kind": "Status", "reason": "Forbidden", "message": 'pods "p" is forbidden'})


@pytest.mark.parametrize(
    ("answers", "persist_s", "error", "posts"),
    [
        ([*[DROPPED] * 6, CREATED], 5.0, None, 7),
        ([*[DROPPED] * 5, FORBIDDEN, FORBIDDEN, CONFLICT], 5.0, None, 8),
        ([*[DROPPED] * 6, CREATED], 0.0, "could not reach the API server", 3),
        ([FORBIDDEN, CREATED], 5.0, "forbidden", 1),
        ([DROPPED, (400, {"kind": "Status", "message": "bad binding"})], 5.0, "bad binding", 2),
        ([DROPPED], 0.05, "could not reach the API server", None),
    ],
    ids=[
        "a bind with time to wait keeps trying an API server that cannot be reached",
        "the 403s of an API server back from a restart are retried, and its 409 says the POST landed",
        "a bind with no time to wait gives up after its tries",
        "a 403 from an API server that was reachable all along is final",
        "a final answer ends the wait at once",
        "the wait is bounded by the caller's budget",
    ],
)
async def test_a_bind_outlasts_an_api_server_restart_within_its_callers_budget(
    fake: tuple[Script, str],
    answers: list[tuple[int, Any]],
    persist_s: float,
    error: str | None,
    posts: int | None,
) -> None:
    """The e2e fault run where kube-apiserver restarted during a gang's release: one binding landed
    with its reply cut off, all three POSTs were given up after four tries, and the gang stayed
    partly bound until kube-scheduler's backoff brought the rest back 18 s later."""
    script, kubeconfig = fake
    script.on("POST", BIND, *answers)
    script.on("GET", POD, (200, {"metadata": {"uid": "u"}, "spec": {"nodeName": "n1"}}))
    source = KubeClusterSource(kubeconfig, settings=FAST)
    try:
        if error is None:
            await source.bind_pod(namespace="ns", name="p", uid="u", node="n1", persist_s=persist_s)
        else:
            with pytest.raises(BindError, match=error):
                await source.bind_pod(namespace="ns", name="p", uid="u", node="n1", persist_s=persist_s)
    finally:
        await source.close()
    if posts is not None:
        assert script.seen.count(("POST", BIND)) == posts
    else:
        assert script.seen.count(("POST", BIND)) >= FAST.write_attempts


@pytest.mark.parametrize(("fence_s", "timeout"), [(5.0, "5000ms"), (0.25, "250ms"), (0.0, None)])
async def test_every_binding_post_asks_the_api_server_to_give_it_up_within_the_fence(
    fake: tuple[Script, str], fence_s: float, timeout: str | None
) -> None:
    """A binding a killed process left in flight must land within the next process's fence or never:
    the API server is told to give each binding up (`?timeout=`, on every retry too)."""
    script, kubeconfig = fake
    script.on("POST", BIND, BUSY, CREATED)
    source = KubeClusterSource(kubeconfig, settings=FAST, bind_fence_s=fence_s)
    try:
        await source.bind_pod(namespace="ns", name="p", uid="u", node="n1")
    finally:
        await source.close()
    posts = [q for path, q in script.queries if path == BIND]
    assert len(posts) == 2
    assert all(q.get("timeout") == timeout for q in posts), posts


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

        def upsert(self, obj: dict[str, Any]) -> None:
            assert obj["apiVersion"] == "v1" and obj["kind"] in ("Node", "Pod")

        def remove(self, obj: dict[str, Any]) -> None: ...

        def unlisted(self, group: str, kind: str, listed: set[str]) -> list[dict[str, Any]]:
            self.lists.append((group, kind, sorted(listed)))
            return []

    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    script.on("GET", "/api/v1/nodes?watch", (200, orjson.dumps(gone) + b"\n"), (200, b""))
    script.on("GET", "/api/v1/pods?watch", (200, b"not json\n"), (200, b""))
    store = Store()
    source = KubeClusterSource(kubeconfig, settings=FAST, _iterations=2)
    await source.run(store)
    assert source.is_synced()
    assert store.lists.count(("", "Node", ["n1"])) == 2, "the 410 on the node watch made it relist"
    assert store.lists.count(("", "Pod", [])) == 1, "a garbled watch line reconnects from the same version"
    assert dict(source.watch_restarts) == {"Node": 1, "Pod": 1}, "each restart after an error is counted"


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
            self.upserts.append(obj["metadata"]["name"])  # the store keeps no resourceVersion

        def remove(self, obj: dict[str, Any]) -> None: ...

        def unlisted(self, group: str, kind: str, listed: set[str]) -> list[dict[str, Any]]:
            return []

    store = Store()
    source = KubeClusterSource(kubeconfig, settings=FAST, _iterations=2)
    await source.run(store)
    watches = [q["resourceVersion"] for path, q in script.queries if path.endswith("?watch")]
    assert watches == ["5", "7"], "the second watch starts after the event the first one applied"
    assert store.upserts == ["p"], "nothing was replayed"


def _pod(name: str, rv: str, *, cpu: str = "100m", node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": spec,
    }


def _poisoned(store: ClusterStore, *names: str) -> ClusterStore:
    """`store` whose upsert raises for the pods named, as a store bug would on one odd object."""
    real = store.upsert

    def upsert(obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] in names:
            raise RuntimeError("the store cannot take this one\n(a second line that must not reach the log)")
        real(obj)

    store.upsert = upsert  # type: ignore[method-assign]
    return store


def _serve_nodes_and_pods(script: Script, *, pods: list[dict[str, Any]], watch: bytes) -> None:
    script.on("GET", "/apis", (200, {"groups": []}))
    script.on("GET", "/api/v1", (200, {"resources": [{"name": "nodes"}, {"name": "pods"}]}))
    node = {
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }
    script.on("GET", "/api/v1/nodes", (200, {"metadata": {"resourceVersion": "5"}, "items": [node]}))
    script.on("GET", "/api/v1/nodes?watch", (200, b""))
    script.on("GET", "/api/v1/pods", (200, {"metadata": {"resourceVersion": "5"}, "items": pods}))
    script.on("GET", "/api/v1/pods?watch", (200, watch), (200, b""))


async def test_one_bad_object_in_the_watch_is_skipped_and_the_watch_goes_on(
    fake: tuple[Script, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 9, defect 2: a pod asking `cpu: "1e16"` (which the API server accepts) raised OverflowError
    out of store.upsert and ended the watch for good. Now the amount saturates, and an object the
    store still cannot take is counted, logged on one line and skipped; later events arrive."""
    script, kubeconfig = fake
    events = [
        {"type": "ADDED", "object": _pod("huge", "6", cpu="1e16", node="n1")},
        {"type": "ADDED", "object": _pod("poison", "7")},
        {"type": "ADDED", "object": _pod("after", "8", node="n1")},
    ]
    _serve_nodes_and_pods(script, pods=[], watch=b"".join(orjson.dumps(e) + b"\n" for e in events))
    store = _poisoned(ClusterStore(), "poison")
    source = KubeClusterSource(kubeconfig, settings=FAST, _iterations=2)
    await source.run(store)  # returns after two watch requests per kind, instead of raising
    assert store.get("", "Pod", "ns", "huge") is not None
    assert store.get("", "Pod", "ns", "after") is not None, "events after the bad one still arrive"
    assert store.get("", "Pod", "ns", "poison") is None
    assert source.bad_objects == 1
    assert source.last_bad_object.startswith("Pod ns/poison: RuntimeError: the store cannot take this one")
    assert "\n" not in source.last_bad_object
    watches = [q["resourceVersion"] for path, q in script.queries if path == "/api/v1/pods?watch"]
    assert watches == ["5", "8"], "the watch resumed after the last event, skipping the bad one for good"
    skipped = [rec.getMessage() for rec in caplog.records if "skipping" in rec.getMessage()]
    assert len(skipped) == 1 and "Pod ns/poison" in skipped[0] and "\n" not in skipped[0]


async def test_one_bad_object_in_a_list_does_not_cost_the_rest_of_it(fake: tuple[Script, str]) -> None:
    """A (re)list applies every other object, removes the ones gone, and counts the one skipped."""
    script, kubeconfig = fake
    listed = [_pod("a", "2", node="n1"), _pod("poison", "3"), _pod("huge", "4", cpu="1e16", node="n1")]
    _serve_nodes_and_pods(script, pods=listed, watch=b"")
    store = _poisoned(ClusterStore(), "poison")
    store.upsert(_pod("gone", "1"))  # in the store from before, absent from the list
    source = KubeClusterSource(kubeconfig, settings=FAST, _iterations=1)
    await source.run(store)
    assert source.is_synced()
    assert sorted(o["metadata"]["name"] for o in store.list("", "Pod")) == ["a", "huge"]
    assert source.bad_objects == 1 and source.last_bad_object.startswith("Pod ns/poison: RuntimeError")


def _nested(pod: dict[str, Any], depth: int) -> bytes:
    """`pod` in JSON with a field nested `depth` levels deep (orjson reads 1024, the API server 10,000)."""
    return orjson.dumps(pod)[:-1] + b',"x":' + b"[" * depth + b"]" * depth + b"}"


async def test_an_object_nested_deeper_than_the_decoder_reads_costs_only_itself(
    fake: tuple[Script, str],
) -> None:
    """A custom resource that keeps unknown fields can be stored 10,000 levels deep. One such object
    failed its whole list page on every relist, and its watch event restarted the watch at the same
    event forever: the kind's cache never moved again. Now it alone is skipped, with its name and
    why; the store keeps the version it read before, and its deletion still lands."""
    script, kubeconfig = fake
    page = (
        b'{"metadata":{"resourceVersion":"5"},"items":['
        + orjson.dumps(_pod("a", "2"))
        + b","
        + _nested(_pod("deep", "3"), 2000)
        + b","
        + orjson.dumps(_pod("b", "4"))
        + b"]}"
    )
    events = [
        orjson.dumps({"type": "MODIFIED", "object": _pod("a", "6", node="n1")}),
        b'{"type":"DELETED","object":' + _nested(_pod("deep", "7"), 3000) + b"}",
        orjson.dumps({"type": "ADDED", "object": _pod("after", "8")}),
        b'{"type":"ADDED","object":' + _nested(_pod("deeper", "9"), 5000) + b"}",
    ]
    _serve_nodes_and_pods(script, pods=[], watch=b"\n".join(events) + b"\n")
    script.on("GET", "/api/v1/pods", (200, page))
    store = ClusterStore()
    store.upsert(_pod("deep", "1"))  # the version read before it was edited past the decoder's depth
    seen: list[tuple[str, str]] = []
    store.add_listener(lambda event, kind, obj: seen.append((event, obj["metadata"]["name"])))
    source = KubeClusterSource(kubeconfig, settings=FAST, _iterations=2)
    await asyncio.wait_for(source.run(store), 30)  # it listed the same page forever
    assert source.is_synced()
    lists = [path for path, _ in script.queries if path == "/api/v1/pods"]
    assert lists == ["/api/v1/pods"], "the page was read once, not retried"
    pods = [s for s in seen if s[1] != "n1"]
    assert pods == [
        ("ADDED", "a"),
        ("ADDED", "b"),  # the list kept the deep one as the store had it
        ("MODIFIED", "a"),
        ("DELETED", "deep"),  # its deletion, read by its name
        ("ADDED", "after"),
    ], pods
    assert sorted(o["metadata"]["name"] for o in store.list("", "Pod")) == ["a", "after", "b"]
    assert source.bad_objects == 2, "the listed object and the watched one, each skipped once"
    assert source.last_bad_object.startswith(
        "Pod ns/deeper: ValueError: it cannot be decoded, nested deeper than the 1024 levels this "
        "service reads"
    )
    assert "edit or delete the object" in source.last_bad_object
    watches = [q["resourceVersion"] for path, q in script.queries if path == "/api/v1/pods?watch"]
    assert watches == ["5", "9"], "the watch resumed after the last event, the deep one, never at it again"


@pytest.mark.parametrize(
    ("read", "data"),
    [
        (nesting.loads_page, b'{"items":[{"metadata":{}}'),
        (nesting.loads_page, b"[" * 3000),
        (nesting.loads_event, b'{"type":"ADDED","object":' + b"[" * 3000),
        (nesting.loads_event, b'{"type":"ADDED","other":' + b"[" * 2000 + b"]" * 2000 + b"}"),
    ],
    ids=[
        "a truncated page",
        "a truncated deep page",
        "a truncated deep event",
        "a deep event with no object",
    ],
)
def test_what_the_fallback_cannot_split_fails_with_the_decoders_error(read: Any, data: bytes) -> None:
    """Only JSON the API server could serve is split: anything else is orjson's error, as before."""
    with pytest.raises(orjson.JSONDecodeError):
        read(data)


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    ("page", "names"),
    [
        (
            b'{"kind":"PodList","metadata":{"continue":"c"},"items":[{"metadata":{"name":"a"}},'
            + b'{"metadata":{"name":"b","namespace":"n","resourceVersion":"7"},"x":'
            + _deep(2000)
            + b"}]}",
            ["a", ("n", "b", "7")],
        ),
        (  # strings that hold brackets, commas, colons, escaped quotes and backslashes
            b' { "items" : [ {"metadata":{"name":"q\\"[{,:"}, "x": '
            + _deep(1500)
            + b' } , {"metadata":{"name":"}]\\\\"}} ] , "metadata" : {} } ',
            [(None, 'q\\"[{,:', None), "}]\\\\"],
        ),
        (b'{"items":[' + _deep(20000) + b',{"metadata":{"name":"z"}}]}', [(None, None, None), "z"]),
        (b'{"items":[{"metadata":' + _deep(1100) + b"}]}", [(None, None, None)]),
    ],
    ids=[
        "a named deep item",
        "strings that look like structure",
        "an item deeper than any server",
        "no name",
    ],
)
def test_a_page_is_split_into_its_items_whatever_their_depth(page: bytes, names: list[Any]) -> None:
    doc = nesting.loads_page(page)
    got: list[Any] = []
    for item in doc["items"]:
        if isinstance(item, nesting.Unreadable):
            meta = item.ref["metadata"]
            got.append((meta.get("namespace"), meta.get("name"), meta.get("resourceVersion")))
        else:
            got.append(item["metadata"]["name"])
    want = [
        tuple(orjson.loads(b'"' + n.encode() + b'"') if isinstance(n, str) else n for n in x)
        if isinstance(x, tuple)
        else orjson.loads(b'"' + x.encode() + b'"')
        for x in names
    ]
    assert got == want
    assert set(doc) <= {"kind", "metadata", "items"}


async def test_an_event_whose_object_is_not_a_mapping_is_skipped(fake: tuple[Script, str]) -> None:
    script, kubeconfig = fake
    events = [
        {"type": "ADDED", "object": ["not", "a", "pod"]},
        {"type": "ADDED", "object": _pod("after", "8")},
    ]
    _serve_nodes_and_pods(script, pods=[[1]], watch=b"".join(orjson.dumps(e) + b"\n" for e in events))
    store = ClusterStore()
    source = KubeClusterSource(kubeconfig, settings=FAST, _iterations=1)
    await source.run(store)
    assert store.get("", "Pod", "ns", "after") is not None
    assert source.bad_objects == 2, "the listed item and the watched object, each skipped"
    assert source.last_bad_object == "Pod ?: ValueError: ADDED event with an object that is not a mapping"


@pytest.mark.parametrize(
    ("status", "words"),
    [(401, "unauthorized (HTTP 401)"), (403, "forbidden (HTTP 403)")],
    ids=["refused credentials end the source", "a forbidden discovery ends the source"],
)
async def test_refused_credentials_are_fatal_not_retried(
    fake: tuple[Script, str], status: int, words: str
) -> None:
    script, kubeconfig = fake
    script.on("GET", "/apis", (status, {"kind": "Status", "message": "Unauthorized"}))
    source = KubeClusterSource(kubeconfig, settings=FAST)
    with pytest.raises(SourceFatalError, match=re.escape(words)) as err:
        await source.run(ClusterStore())
    assert "--kubeconfig" in str(err.value)
    assert script.seen == [("GET", "/apis")], "asked once: retrying cannot help"


async def test_a_failing_discovery_is_retried(fake: tuple[Script, str]) -> None:
    script, kubeconfig = fake
    script.on("GET", "/apis", BUSY, BUSY, (200, {"groups": []}))
    script.on("GET", "/api/v1", (200, {"resources": []}))
    source = KubeClusterSource(kubeconfig, settings=FAST)
    task = asyncio.ensure_future(source.run(ClusterStore()))
    for _ in range(500):
        if source.is_synced():
            break
        await asyncio.sleep(0.01)
    task.cancel()
    assert source.is_synced() and script.seen[:3] == [("GET", "/apis")] * 3


FORBIDDEN = (403, {"kind": "Status", "reason": "Forbidden", "message": "events is forbidden"})


@pytest.mark.parametrize(
    ("answers", "pod_node", "counted"),
    [
        ([CREATED], None, {}),
        ([BUSY, SLOW_DOWN, CREATED], None, {}),
        ([CONFLICT], "n1", {}),
        ([CONFLICT], "n2", {("bind", "4xx"): 1}),
        ([BUSY, BUSY, BUSY], None, {("bind", "5xx"): 1}),
        ([(-1, None)], None, {("bind", "connection"): 1}),
        ([(400, {"kind": "Status", "message": "bad binding"})], None, {("bind", "4xx"): 1}),
    ],
    ids=[
        "a bind is no error",
        "retried answers are not errors when the write lands",
        "a 409 for our own landed bind is no error",
        "a 409 for a pod on another node is one",
        "a write that fails every try counts once",
        "no answer at all is a connection error",
        "a 400 counts at once",
    ],
)
async def test_failed_binds_are_counted_by_status_class(
    fake: tuple[Script, str], answers: list[tuple[int, Any]], pod_node: str | None, counted: dict
) -> None:
    script, kubeconfig = fake
    script.on("POST", BIND, *answers)
    script.on("GET", POD, (200, {"metadata": {"uid": "u"}, "spec": {"nodeName": pod_node}}))
    source = KubeClusterSource(kubeconfig, settings=FAST)
    try:
        try:
            await source.bind_pod(namespace="ns", name="p", uid="u", node="n1")
        except BindError:
            pass
    finally:
        await source.close()
    assert dict(source.write_errors) == counted


async def test_every_kind_of_write_counts_its_own_errors(fake: tuple[Script, str]) -> None:
    script, kubeconfig = fake
    script.on("POST", "/api/v1/namespaces/ns/events", FORBIDDEN)
    script.on("PATCH", POD + "/status", (422, {"kind": "Status", "message": "invalid condition"}))
    script.on("PATCH", POD, BUSY)
    source = KubeClusterSource(kubeconfig, settings=FAST)
    try:
        await source.emit_event(
            namespace="ns",
            name="pg",
            uid="u1",
            kind="PodGroup",
            reason="GangPlanned",
            message="m",
            api_version="scheduling.run.ai/v2alpha2",
        )
        await source.set_pod_condition(namespace="ns", name="p", condition={"type": "X", "status": "False"})
        await source.nudge_pod(namespace="ns", name="p", value="v")
    finally:
        await source.close()
    assert dict(source.write_errors) == {("event", "4xx"): 1, ("condition", "4xx"): 1, ("nudge", "5xx"): 1}


async def test_an_event_names_the_objects_api_version(fake: tuple[Script, str]) -> None:
    script, kubeconfig = fake
    script.on("POST", "/api/v1/namespaces/ns/events", CREATED)
    source = KubeClusterSource(kubeconfig, settings=FAST)
    try:
        for api_version, kind in (
            ("scheduling.k8s.io/v1alpha2", "PodGroup"),
            ("kubeflow.org/v1", "PyTorchJob"),
        ):
            await source.emit_event(
                namespace="ns",
                name="x",
                uid=kind,  # two objects: the limit is per object and reason
                kind=kind,
                reason="GangBound",
                message="m",
                api_version=api_version,
            )
    finally:
        await source.close()
    bodies = [orjson.loads(body) for _, body in script.bodies]
    assert [b["involvedObject"]["apiVersion"] for b in bodies] == [
        "scheduling.k8s.io/v1alpha2",
        "kubeflow.org/v1",
    ]
    assert source.write_errors == {}


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [
        ("Pod", "v1"),
        ("Job", "batch/v1"),
        ("JobSet", "jobset.x-k8s.io/v1alpha2"),
        ("PyTorchJob", "kubeflow.org/v1"),
        ("PodGroup", ""),  # served by two groups: never guessed
        ("Workload", ""),  # not served here
    ],
)
def test_the_watched_version_of_a_kind_is_its_events_api_version_unless_ambiguous(kind, api_version):
    from extender.state.kube import ServedKind

    source = KubeClusterSource("unused", settings=FAST)
    source._served = {
        (group, k): ServedKind(group, version, plural, k, True)
        for group, version, plural, k in (
            ("batch", "v1", "jobs", "Job"),
            ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
            ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
            ("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup"),
            ("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup"),
        )
    }
    assert source._api_version_of(kind) == api_version


PODGROUPS = "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups"
FORBIDDEN = (403, {"kind": "Status", "reason": "Forbidden", "message": "podgroups is forbidden"})
EXISTS = (409, {"kind": "Status", "reason": "AlreadyExists", "message": "podgroups pg exists"})
GONE = (404, {"kind": "Status", "reason": "NotFound", "message": "podgroups pg not found"})
PRECONDITION = (409, {"kind": "Status", "reason": "Conflict", "message": "Precondition failed: UID"})


@pytest.mark.parametrize(
    ("method", "path", "answers", "done"),
    [
        ("POST", PODGROUPS, [CREATED], True),
        ("POST", PODGROUPS, [BUSY, CREATED], True),
        ("POST", PODGROUPS, [EXISTS], True),
        ("POST", PODGROUPS, [FORBIDDEN], False),
        ("POST", PODGROUPS, [BUSY, BUSY, BUSY], False),
        ("PATCH", f"{PODGROUPS}/pg", [(200, {})], True),
        ("PATCH", f"{PODGROUPS}/pg", [GONE], True),
        ("PATCH", f"{PODGROUPS}/pg", [FORBIDDEN], False),
        ("DELETE", f"{PODGROUPS}/pg", [(200, {})], True),
        ("DELETE", f"{PODGROUPS}/pg", [PRECONDITION], True),
        ("DELETE", f"{PODGROUPS}/pg", [GONE], True),
        ("DELETE", f"{PODGROUPS}/pg", [FORBIDDEN], False),
    ],
    ids=[
        "create: 201",
        "create: a 5xx is retried",
        "create: 409 AlreadyExists is done (the watch shows whose it is)",
        "create: 403 is to be tried again later",
        "create: retries are bounded",
        "patch: 200",
        "patch: 404 is done (its deletion is watched)",
        "patch: 403 is to be tried again later",
        "delete: 200",
        "delete: a uid precondition that failed is done (another object has the name now)",
        "delete: 404 is done",
        "delete: 403 is to be tried again later",
    ],
)
async def test_object_writes_say_whether_they_are_done(
    fake: tuple[Script, str], method: str, path: str, answers: list[tuple[int, Any]], done: bool
) -> None:
    from extender.state.kube import ServedKind

    script, kubeconfig = fake
    script.on(method, path, *answers)
    source = KubeClusterSource(kubeconfig, settings=FAST)
    source._served = {
        ("scheduling.run.ai", "PodGroup"): ServedKind(
            "scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", True
        )
    }
    target = {"group": "scheduling.run.ai", "kind": "PodGroup"}
    try:
        if method == "POST":
            obj = {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "ns"},
            }
            got = await source.create_object(**target, obj=obj)
        elif method == "PATCH":
            got = await source.patch_object(
                **target, namespace="ns", name="pg", patch={"spec": {"minMember": 2}}
            )
        else:
            got = await source.delete_object(**target, namespace="ns", name="pg", uid="u1")
    finally:
        await source.close()
    assert got is done
    assert script.seen[0] == (method, path)


async def test_an_object_write_for_a_kind_the_server_does_not_serve_is_not_done(
    fake: tuple[Script, str],
) -> None:
    script, kubeconfig = fake
    source = KubeClusterSource(kubeconfig, settings=FAST)
    try:
        assert not await source.create_object(
            group="scheduling.run.ai", kind="PodGroup", obj={"metadata": {}}
        )
    finally:
        await source.close()
    assert script.seen == []


EVICT = "/api/v1/namespaces/ns/pods/p/eviction"
POLICY_V1 = (
    200,
    {"kind": "APIGroup", "name": "policy", "versions": [{"version": "v1"}, {"version": "v1beta1"}]},
)
POLICY_V1BETA1 = (200, {"kind": "APIGroup", "name": "policy", "versions": [{"version": "v1beta1"}]})
BUDGET = (
    429,
    {"kind": "Status", "message": "Cannot evict pod as it would violate the pod's disruption budget."},
)


@pytest.mark.parametrize(
    ("policy", "answers", "done", "api_version", "counted"),
    [
        (POLICY_V1, [CREATED], True, "policy/v1", {}),
        (POLICY_V1BETA1, [CREATED], True, "policy/v1beta1", {}),
        (POLICY_V1, [(404, {"kind": "Status", "message": "pods p not found"})], True, "policy/v1", {}),
        (
            POLICY_V1,
            [(409, {"kind": "Status", "message": "Precondition failed: UID"})],
            True,
            "policy/v1",
            {},
        ),
        (POLICY_V1, [BUSY, CREATED], True, "policy/v1", {}),
        (POLICY_V1, [BUDGET], False, "policy/v1", {("evict", "4xx"): 1}),
        (
            POLICY_V1,
            [(403, {"kind": "Status", "message": "forbidden"})],
            EvictionFailed,
            "policy/v1",
            {("evict", "4xx"): 1},
        ),
        (POLICY_V1, [BUSY] * 8, EvictionUnanswered, "policy/v1", {("evict", "5xx"): 1}),
    ],
    ids=[
        "policy/v1 where served",
        "policy/v1beta1 where v1 is not served (1.20)",
        "404: already gone is done",
        "409: the uid precondition failed (another pod has the name) is done",
        "5xx is retried",
        "429 from a PodDisruptionBudget: not done, asked again later, counted",
        "403: not done, for good (no budget's 'not now'), counted",
        "5xx on every try: no answer, it may have landed",
    ],
)
async def test_evictions(
    fake: tuple[Script, str],
    policy: tuple[int, Any],
    answers: list[tuple[int, Any]],
    done: Any,
    api_version: str,
    counted: dict,
) -> None:
    script, kubeconfig = fake
    script.on("GET", "/apis/policy", policy)
    script.on("POST", EVICT, *answers)
    source = KubeClusterSource(kubeconfig, settings=FAST)

    async def evict(reason: str) -> Any:
        try:
            return await source.evict_pod(namespace="ns", name="p", uid="u1", reason=reason)
        except (EvictionFailed, EvictionUnanswered) as exc:
            return type(exc)

    try:
        got = await evict("gang ns/x: member ns/x-3 went")
        await evict("again")
    finally:
        await source.close()
    assert got is done
    assert script.seen.count(("GET", "/apis/policy")) == 1  # discovered once
    body = orjson.loads(next(b for p, b in script.bodies if p == EVICT))
    assert body == {
        "apiVersion": api_version,
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "ns"},
        "deleteOptions": {"preconditions": {"uid": "u1"}},
    }
    assert {k: v for k, v in source.write_errors.items()} == {k: 2 * v for k, v in counted.items()}


EXPIRED = (410, {"kind": "Status", "code": 410, "reason": "Expired", "message": "continue token expired"})


@pytest.mark.parametrize(
    "broken",
    [EXPIRED, BUSY],
    ids=["an expired continue token restarts the list", "a page that fails fails the list, which is retried"],
)
async def test_a_paged_list_applies_every_page_and_removes_what_it_no_longer_has(
    fake: tuple[Script, str], broken: tuple[int, Any]
) -> None:
    """Pages are applied as they arrive; the end of the list removes
    what the store held and no page had."""
    script, kubeconfig = fake
    first = (200, {"metadata": {"continue": "c1"}, "items": [_pod("a", "2", node="n1")]})
    last = (200, {"metadata": {"resourceVersion": "9"}, "items": [_pod("b", "3", node="n1")]})
    _serve_nodes_and_pods(script, pods=[], watch=b"")
    script.on("GET", "/api/v1/pods", first, broken, first, last)
    store = ClusterStore()
    store.upsert(_pod("gone", "1"))
    source = KubeClusterSource(kubeconfig, settings=FAST, _iterations=1)
    await source.run(store)
    assert source.is_synced()
    assert sorted(o["metadata"]["name"] for o in store.list("", "Pod")) == ["a", "b"]
    pages = [q.get("continue", "") for path, q in script.queries if path == "/api/v1/pods"]
    assert pages == ["", "c1", "", "c1"]
    watches = [q["resourceVersion"] for path, q in script.queries if path == "/api/v1/pods?watch"]
    assert watches == ["9"], "the watch starts from the version of the list that completed"


def test_concurrent_lists_share_one_pause_of_the_cyclic_collector() -> None:
    """The collector comes back when the last list ends, whichever ends first; one paused by someone
    else stays paused."""
    import gc

    from extender.state.kube import _collector_paused

    assert gc.isenabled()
    nodes, pods = _collector_paused(), _collector_paused()
    nodes.__enter__()
    pods.__enter__()
    nodes.__exit__(None, None, None)
    assert not gc.isenabled(), "the pod list is still under way"
    pods.__exit__(None, None, None)
    assert gc.isenabled()
    gc.disable()
    try:
        with _collector_paused():
            pass
        assert not gc.isenabled(), "paused by someone else: left to them"
    finally:
        gc.enable()


async def test_a_status_field_the_server_prunes_is_left_out_until_the_recheck(
    fake: tuple[Script, str],
) -> None:
    """The answer to a status PATCH is the object as stored: a field set in the patch but absent there
    was pruned by the served schema (KAI v0.16 dropped `phase`), so the next writes leave it out; past
    `status_field_recheck_s` it is tried once more, and written again when the schema keeps it."""
    from extender.state.kube import ServedKind

    script, kubeconfig = fake
    path = "/apis/scheduling.run.ai/v2alpha2/namespaces/ns/podgroups/pg/status"
    conditions = [{"type": "UnschedulableOnNodePool", "message": "waits"}]
    pruned = (200, {"kind": "PodGroup", "status": {"schedulingConditions": conditions}})
    kept = (200, {"kind": "PodGroup", "status": {"phase": "Pending", "schedulingConditions": conditions}})
    script.on("PATCH", path, pruned, pruned, pruned, pruned, kept, kept)
    now = [1000.0]
    settings = KubeSettings(write_attempts=1, status_field_recheck_s=60.0)
    source = KubeClusterSource(kubeconfig, settings=settings, clock=lambda: now[0])
    source._served = {
        ("scheduling.run.ai", "PodGroup"): ServedKind(
            "scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", True
        )
    }
    status = {"phase": "Pending", "schedulingConditions": conditions}
    written = []
    try:
        for advance_s in (0.0, 30.0, 31.0, 0.0, 61.0, 0.0):
            now[0] += advance_s
            await source.patch_group_status(
                group="scheduling.run.ai", kind="PodGroup", namespace="ns", name="pg", status=status
            )
            written.append(sorted(orjson.loads(script.bodies[-1][1])["status"]))
    finally:
        await source.close()
    assert written == [
        ["phase", "schedulingConditions"],  # pruned: learned
        ["schedulingConditions"],  # 30 s later: left out
        ["phase", "schedulingConditions"],  # 61 s after it was seen: tried again, pruned again
        ["schedulingConditions"],
        ["phase", "schedulingConditions"],  # tried again, and this time the schema keeps it
        ["phase", "schedulingConditions"],  # so it is written from now on
    ]
    assert source.write_errors == {}


def _served_late(script: Script, kind: Any, listed: dict, *apis: Any) -> Any:
    """Script a kind served only after start-up: `/apis` answers `apis` in turn, the core API serves
    pods (none), and the kind's group version lists `listed`. Returns the pods' WatchedKind."""
    from extender.state.kube import WatchedKind

    version = kind.versions[0]
    script.on("GET", "/apis", *apis)
    script.on("GET", "/api/v1", (200, {"resources": [{"name": "pods"}]}))
    script.on("GET", f"/apis/{kind.group}/{version}", (200, {"resources": [{"name": kind.plural}]}))
    script.on("GET", "/api/v1/pods", (200, {"metadata": {"resourceVersion": "1"}, "items": []}))
    script.on(
        "GET",
        f"/apis/{kind.group}/{version}/{kind.plural}",
        (200, {"metadata": {"resourceVersion": "2"}, "items": [listed]}),
    )
    return WatchedKind("", ("v1",), "pods", "Pod")


async def _run_until_stored(source: Any, store: ClusterStore, kind: Any, name: str) -> asyncio.Task:
    """Run `source` into `store` until the kind's object ns/`name` is in it; the task, still running."""
    task = asyncio.ensure_future(source.run(store))
    for _ in range(500):
        if store.listed is not None and store.get(kind.group, kind.kind, "ns", name) is not None:
            break
        await asyncio.sleep(0.01)
    assert not task.done(), task
    return task


def _served(group: str, versions: Any) -> tuple[int, dict]:
    return (200, {"groups": [{"name": group, "versions": versions}]})


async def test_a_kind_served_later_is_found_whatever_discovery_answered_meanwhile(
    fake: tuple[Script, str],
) -> None:
    """A CRD installed after start-up: discovery is asked again, and an answer of an odd shape or an
    error in between costs nothing (found by review: a TypeError ended every watch for good)."""
    import dataclasses

    from extender.state.kube import WatchedKind

    script, kubeconfig = fake
    widgets = WatchedKind("example.com", ("v1",), "widgets", "Widget")
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}}
    none = (200, {"groups": []})
    odd = _served("example.com", 1)
    pods = _served_late(script, widgets, widget, none, odd, BUSY, _served("example.com", [{"version": "v1"}]))
    source = KubeClusterSource(
        kubeconfig, settings=dataclasses.replace(FAST, rediscovery_s=0.001), kinds=(pods, widgets)
    )
    store = ClusterStore()
    task = await _run_until_stored(source, store, widgets, "w")
    try:
        assert store.listed == frozenset({("", "Pod"), ("example.com", "Widget")})
        assert store.lists("example.com", "Widget")
        assert script.seen.count(("GET", "/apis")) == 4
    finally:
        task.cancel()


async def test_an_object_owned_by_a_kind_not_served_asks_discovery_at_once(fake: tuple[Script, str]) -> None:
    """A pod arrives owned by a PyTorchJob while pytorchjobs were not served at start-up: the training
    operator's CRDs are installed now. Discovery is asked at once, not at the next period (an hour
    here), so the PyTorchJob's pods are grouped by it from the start."""
    import dataclasses

    from extender.state.kube import WatchedKind

    script, kubeconfig = fake
    jobs = WatchedKind("kubeflow.org", ("v1",), "pytorchjobs", "PyTorchJob")
    pytorchjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "ns"},
    }
    served = _served("kubeflow.org", [{"version": "v1"}])
    pods = _served_late(script, jobs, pytorchjob, (200, {"groups": []}), served)
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "pt",
        "uid": "u1",
        "controller": True,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pt-worker-0", "namespace": "ns", "uid": "p1", "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "c"}]},
    }
    event = orjson.dumps({"type": "ADDED", "object": pod}) + b"\n"
    script.on("GET", "/api/v1/pods?watch", (200, event), (200, b""))
    source = KubeClusterSource(
        kubeconfig, settings=dataclasses.replace(FAST, rediscovery_s=3600), kinds=(pods, jobs)
    )
    store = ClusterStore()
    task = await _run_until_stored(source, store, jobs, "pt")
    try:
        assert store.lists("kubeflow.org", "PyTorchJob")
        assert script.seen.count(("GET", "/apis")) == 2
    finally:
        task.cancel()
