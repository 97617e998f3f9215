"""The fault-injection proxies do what the e2e scenarios rely on, against in-process upstreams.

Fast checks (no control plane): ExtenderProxy in front of a plain-HTTP aiohttp app, ApiProxy in front of
an HTTPS one with a throwaway self-signed certificate made by `openssl`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import random
import shutil
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
import yaml
from aiohttp import web
from controlplane.proxies import ApiProxy, ExtenderProxy, LoopThread
from controlplane.start import wait_until

TOKEN = "proxy-test-token"


def fetch(
    method: str,
    url: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    *,
    timeout_s: float = 5.0,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection (http.client: no proxy settings from the environment)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=timeout_s)
    try:
        conn.request(method, u.path + (f"?{u.query}" if u.query else ""), body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


class Upstream:
    """An aiohttp app served on its own loop thread; `seen` lists (method, path?query, headers, body)."""

    def __init__(self, add_routes: Callable[[Upstream, web.Application], None], *, tls: Path | None = None):
        self.add_routes = add_routes
        self.tls = tls
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.watch_queues: list[asyncio.Queue[bytes]] = []  # one per open watch, for push()
        self.thread = LoopThread("upstream")
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def _record(self, request: web.Request) -> bytes:
        body = await request.read()
        self.seen.append((request.method, request.path_qs, dict(request.headers), body))
        return body

    def start(self) -> Upstream:
        async def start() -> str:
            app = web.Application(client_max_size=1 << 30)
            self.add_routes(self, app)
            self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            await self.runner.setup()
            ctx = None
            if self.tls is not None:
                ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                ctx.load_cert_chain(self.tls / "cert.pem", self.tls / "key.pem")
            await web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ctx).start()
            host, port = self.runner.addresses[0][:2]
            return f"{'https' if ctx else 'http'}://{host}:{port}"

        self.url = self.thread.call(start())
        return self

    def stop(self) -> None:
        if self.runner is not None:
            self.thread.call(self.runner.cleanup())
            self.runner = None
        self.thread.close()


# -- ExtenderProxy ---------------------------------------------------------------------------------


def extender_routes(up: Upstream, app: web.Application) -> None:
    async def filter_(request: web.Request) -> web.Response:
        body = await up._record(request)
        doc = orjson.loads(body)
        reply = {"NodeNames": doc["NodeNames"], "FailedNodes": {}, "Error": ""}
        return web.Response(body=orjson.dumps(reply), content_type="application/json", headers={"X-Up": "1"})

    async def bind(request: web.Request) -> web.Response:
        doc = orjson.loads(await up._record(request))
        return web.json_response({"Error": "", "Pod": f"{doc['PodNamespace']}/{doc['PodName']}"})

    async def teapot(request: web.Request) -> web.Response:
        await up._record(request)
        return web.Response(status=418, text="short and stout")

    app.router.add_post("/gang/filter", filter_)
    app.router.add_post("/gang/bind", bind)
    app.router.add_get("/gang/teapot", teapot)


def filter_body(ns: str, name: str) -> bytes:
    pod = {"metadata": {"namespace": ns, "name": name}, "spec": {}}
    return orjson.dumps({"Pod": pod, "NodeNames": ["n1", "n2"]})


def bind_body(ns: str, name: str) -> bytes:
    return orjson.dumps({"PodName": name, "PodNamespace": ns, "PodUID": "u", "Node": "n1"})


@pytest.fixture
def extender() -> Iterator[tuple[Upstream, ExtenderProxy]]:
    up = Upstream(extender_routes).start()
    proxy = ExtenderProxy(up.url + "/gang", timeout_s=5.0).start()
    yield up, proxy
    proxy.stop()
    up.stop()


def test_extender_proxy_forwards_and_records_calls(extender: tuple[Upstream, ExtenderProxy]) -> None:
    up, proxy = extender
    before = time.monotonic()
    status, headers, body = fetch(
        "POST", proxy.url + "/filter?x=1", filter_body("ns", "p0"), {"Content-Type": "application/json"}
    )
    assert status == 200 and headers["X-Up"] == "1"
    assert orjson.loads(body)["NodeNames"] == ["n1", "n2"]
    method, path_qs, up_headers, up_body = up.seen[0]
    assert (method, path_qs, up_body) == ("POST", "/gang/filter?x=1", filter_body("ns", "p0"))
    assert up_headers["Content-Type"] == "application/json"
    assert up_headers["Host"] == up.url.removeprefix("http://")  # the upstream's, not the proxy's

    assert fetch("GET", proxy.url + "/teapot")[::2] == (418, b"short and stout")
    assert fetch("POST", proxy.url + "/bind", bind_body("ns", "p0"))[0] == 200
    calls = proxy.calls()
    assert [(v, k) for v, k, _ in calls] == [("filter", "ns/p0"), ("teapot", ""), ("bind", "ns/p0")]
    assert all(before <= t <= time.monotonic() for _, _, t in calls)


def test_held_binds_are_released_in_order_and_answered(extender: tuple[Upstream, ExtenderProxy]) -> None:
    up, proxy = extender
    proxy.hold_binds(True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        pending = {}
        for name in ("a", "b", "c"):
            pending[name] = pool.submit(fetch, "POST", proxy.url + "/bind", bind_body("ns", name))
            wait_until(lambda name=name: f"ns/{name}" in proxy.held(), timeout_s=5, what=f"bind {name} held")
        assert proxy.held() == ["ns/a", "ns/b", "ns/c"]
        assert up.seen == []  # nothing reached the service yet
        # Filters are never held.
        assert fetch("POST", proxy.url + "/filter", filter_body("ns", "a"))[0] == 200

        assert proxy.release(2) == ["ns/a", "ns/b"]
        for name in ("a", "b"):
            status, _, body = pending[name].result(timeout=5)
            assert status == 200 and orjson.loads(body)["Pod"] == f"ns/{name}"
        binds = [orjson.loads(b)["PodName"] for _, p, _, b in up.seen if p.endswith("/bind")]
        assert binds == ["a", "b"]
        assert not pending["c"].done() and proxy.held() == ["ns/c"]

        proxy.hold_binds(False)  # releases the rest
        assert pending["c"].result(timeout=5)[0] == 200
        assert proxy.held() == []
        assert fetch("POST", proxy.url + "/bind", bind_body("ns", "d"))[0] == 200  # not held any more


def test_extender_proxy_502_when_the_service_is_gone(extender: tuple[Upstream, ExtenderProxy]) -> None:
    up, proxy = extender
    proxy.hold_binds(True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        held = pool.submit(fetch, "POST", proxy.url + "/bind", bind_body("ns", "a"))
        wait_until(lambda: proxy.held() == ["ns/a"], timeout_s=5, what="bind held")
        assert fetch("POST", proxy.url + "/filter", filter_body("ns", "a"))[0] == 200  # a kept-alive link
        up.stop()
        assert proxy.release() == ["ns/a"]
        status, _, body = held.result(timeout=5)
        assert status == 502 and b"unreachable" in body
    started = time.monotonic()
    status, _, body = fetch("POST", proxy.url + "/filter", filter_body("ns", "b"))
    assert status == 502 and b"unreachable" in body
    assert time.monotonic() - started < 3.0  # refused at once, not the client timeout


def test_stop_answers_held_binds_with_502() -> None:
    proxy = ExtenderProxy("http://127.0.0.1:9").start()  # nothing listens there; nothing is forwarded
    proxy.hold_binds(True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(fetch, "POST", proxy.url + "/bind", bind_body("ns", "a"))
        wait_until(lambda: proxy.held() == ["ns/a"], timeout_s=5, what="bind held")
        proxy.stop()
        assert held.result(timeout=5)[0] == 502
    proxy.stop()  # idempotent
    with pytest.raises(OSError):
        fetch("GET", proxy.url + "/filter", timeout_s=2.0)


# -- ApiProxy --------------------------------------------------------------------------------------

BIG = bytes(range(256)) * (6 * 4096)  # 6 MiB


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed: no certificate for the HTTPS upstream")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")),
        ],
        check=True,
        capture_output=True,
    )
    return d


def api_routes(up: Upstream, app: web.Application) -> None:
    async def echo(request: web.Request) -> web.Response:
        body = await up._record(request)
        doc = {
            "method": request.method,
            "query": dict(request.query),
            "authorization": request.headers.get("Authorization"),
            "body": body.decode(),
        }
        return web.json_response(doc)

    async def pods(request: web.Request) -> web.StreamResponse:
        await up._record(request)
        if request.query.get("watch") != "true":
            return web.Response(body=BIG, content_type="application/json")
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        up.watch_queues.append(queue)
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(request)
        await resp.write(b'{"type":"ADDED","n":1}\n')
        while True:  # one event per push() from the test, until the connection goes
            await resp.write(await queue.get())

    async def binding(request: web.Request) -> web.Response:
        await up._record(request)
        return web.json_response({"kind": "Status", "status": "Success", "code": 201}, status=201)

    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/api/v1/pods", pods)
    app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", binding)


def push(up: Upstream, line: bytes) -> None:
    """The newest watch's upstream handler writes `line` as its next chunk."""
    queue = up.watch_queues[-1]
    up.thread.loop.call_soon_threadsafe(queue.put_nowait, line)


@pytest.fixture
def api(tls: Path) -> Iterator[tuple[Upstream, ApiProxy]]:
    up = Upstream(api_routes, tls=tls).start()
    assert up.url.startswith("https://")
    proxy = ApiProxy(up.url, token=TOKEN, timeout_s=5.0).start()
    yield up, proxy
    proxy.stop()
    up.stop()


def bind(proxy: ApiProxy, name: str) -> tuple[int, dict[str, str], bytes]:
    body = orjson.dumps({"kind": "Binding", "target": {"kind": "Node", "name": "n1"}})
    return fetch("POST", f"{proxy.url}/api/v1/namespaces/ns/pods/{name}/binding", body)


def test_api_proxy_forwards_to_https_and_streams_large_bodies(
    api: tuple[Upstream, ApiProxy], tmp_path: Path
) -> None:
    _, proxy = api
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, _, body = fetch("PUT", proxy.url + "/echo?a=1&b=two", b"payload", auth)
    assert status == 200
    assert orjson.loads(body) == {
        "method": "PUT",
        "query": {"a": "1", "b": "two"},
        "authorization": f"Bearer {TOKEN}",
        "body": "payload",
    }
    status, headers, body = fetch("GET", proxy.url + "/api/v1/pods", headers=auth)
    assert status == 200 and body == BIG and int(headers["Content-Length"]) == len(BIG)
    assert proxy.counts()["requests"] == 2

    cfg = yaml.safe_load(proxy.write_kubeconfig(tmp_path / "kubeconfig").read_text())
    assert cfg["clusters"][0]["cluster"]["server"] == proxy.url
    assert cfg["users"][0]["user"]["token"] == TOKEN


def test_binding_delay(api: tuple[Upstream, ApiProxy]) -> None:
    up, proxy = api
    proxy.delay_bindings_s(0.3)
    started = time.monotonic()
    assert bind(proxy, "p0")[0] == 201
    assert time.monotonic() - started >= 0.3
    proxy.delay_bindings_s(0)
    assert bind(proxy, "p1")[0] == 201
    assert fetch("GET", proxy.url + "/echo")[0] == 200  # not a binding: never delayed
    counts = proxy.counts()
    assert (counts["bindings_delayed"], counts["bindings_forwarded"], counts["bindings_failed"]) == (1, 2, 0)
    assert [p for _, p, _, _ in up.seen if p.endswith("/binding")] == [
        "/api/v1/namespaces/ns/pods/p0/binding",
        "/api/v1/namespaces/ns/pods/p1/binding",
    ]


def test_binding_failures_follow_the_seed(api: tuple[Upstream, ApiProxy]) -> None:
    up, proxy = api
    proxy.fail_bindings(0.5, seed=7)
    draws = random.Random(7)
    expected = [draws.random() < 0.5 for _ in range(20)]
    got = []
    for i in range(20):
        status, _, body = bind(proxy, f"p{i}")
        got.append(status == 503)
        if status == 503:
            assert orjson.loads(body) == {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": "injected by ApiProxy",
                "reason": "ServiceUnavailable",
                "code": 503,
            }
        else:
            assert status == 201
    assert got == expected and 0 < sum(got) < 20
    counts = proxy.counts()
    assert counts["bindings_failed"] == sum(got)
    assert counts["bindings_forwarded"] == 20 - sum(got) == len(up.seen)  # failed ones never arrived

    proxy.fail_bindings(1.0, status=500)
    status, _, body = bind(proxy, "q")
    assert status == 500 and orjson.loads(body)["reason"] == "InternalError"
    proxy.fail_bindings(0)
    assert bind(proxy, "r")[0] == 201


def open_watch(proxy: ApiProxy) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    u = urllib.parse.urlsplit(proxy.url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=5.0)
    conn.request("GET", "/api/v1/pods?watch=true&resourceVersion=1")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
    return conn, resp


def test_watch_streams_chunk_by_chunk_until_cut(api: tuple[Upstream, ApiProxy]) -> None:
    up, proxy = api
    conn, resp = open_watch(proxy)
    try:
        # Each event arrives while the upstream still holds the next back: nothing is buffered.
        assert resp.readline() == b'{"type":"ADDED","n":1}\n'
        push(up, b'{"type":"MODIFIED","n":2}\n')
        assert resp.readline() == b'{"type":"MODIFIED","n":2}\n'
        assert proxy.counts()["watches_open"] == 1

        assert proxy.cut_watches() == 1
        assert proxy.counts()["watches_open"] == 0  # counted out at once
        # Cut mid-stream: no terminating chunk, so the client sees a broken stream, not a clean end.
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            resp.read()
    finally:
        conn.close()
    counts = proxy.counts()
    assert (counts["watches_open"], counts["watches_cut"]) == (0, 1)

    conn, resp = open_watch(proxy)  # a new watch works
    try:
        assert resp.readline() == b'{"type":"ADDED","n":1}\n'
        push(up, b'{"type":"DELETED","n":3}\n')
        assert resp.readline() == b'{"type":"DELETED","n":3}\n'
    finally:
        conn.close()
    # The client hung up on its own: the proxy notices within its 1 s check and lets the upstream go.
    wait_until(lambda: proxy.counts()["watches_open"] == 0, timeout_s=4, what="the closed watch to go")
    assert proxy.counts()["watches_cut"] == 1


def test_refuse_closes_connections_until_turned_off(api: tuple[Upstream, ApiProxy]) -> None:
    up, proxy = api
    proxy.refuse(True)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        fetch("GET", proxy.url + "/echo")
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        bind(proxy, "p0")
    assert up.seen == []
    counts = proxy.counts()
    assert (counts["refused"], counts["bindings_forwarded"]) == (2, 0)

    proxy.refuse(False)
    assert fetch("GET", proxy.url + "/echo")[0] == 200
    assert bind(proxy, "p0")[0] == 201

    # A full outage: open watches are cut as well.
    conn, resp = open_watch(proxy)
    try:
        assert resp.readline() == b'{"type":"ADDED","n":1}\n'
        proxy.refuse(True, cut_watches=True)
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            resp.read()
    finally:
        conn.close()
    assert proxy.counts()["watches_cut"] == 1


def test_api_proxy_answers_502_when_the_api_server_is_gone(api: tuple[Upstream, ApiProxy]) -> None:
    up, proxy = api
    up.stop()
    status, _, body = fetch("GET", proxy.url + "/echo")
    assert status == 502 and orjson.loads(body)["kind"] == "Status"
