"""Fault-injection proxies for the end-to-end tier, each an aiohttp server on its own event-loop thread.

Owns: `ExtenderProxy`, between kube-scheduler and the service (records every extender call, holds and
releases /bind calls, answers 502 when the service is gone), and `ApiProxy`, between the service and
kube-apiserver (plain HTTP in, HTTPS out; delays or fails pod bindings, cuts watch streams, refuses
requests, counts what it did). The e2e tests are synchronous, so each proxy runs its asyncio loop on
a daemon thread (`LoopThread`) and every public method is a thread-safe synchronous call.

Wiring: point kube-scheduler's extender urlPrefix at `ExtenderProxy(service_url).url`; start the
service with `--kubeconfig` from `ApiProxy(plane.server, token=TOKEN).write_kubeconfig(path)`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace, TracebackType
from typing import Any, Self, TypeVar

import aiohttp
import orjson
import yaml
from aiohttp import web
from multidict import CIMultiDict

T = TypeVar("T")

# Never copied across the proxy: they describe one connection, not the message (RFC 9110 7.6.1), and
# Host must name the upstream. Content-Length is recomputed by aiohttp from the bytes actually sent.
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Trailers",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)
# aiohttp's client adds these when absent; a proxy must send exactly what it was sent (an added
# Accept-Encoding would make the upstream gzip a body the downstream client never asked to decode).
NO_AUTO_HEADERS = ("Accept-Encoding", "User-Agent", "Content-Type")
# How long a stop() waits for handlers still running before cancelling them.
SHUTDOWN_TIMEOUT_S = 1.0
# Kubernetes Status reasons for the statuses fail_bindings() is likely to be asked for.
STATUS_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class LoopThread:
    """An asyncio event loop running forever on a daemon thread; `call()` runs a coroutine on it and
    waits for its result from any other thread. The tests use it for their in-process upstreams too."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = 30.0) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.call() from its own loop would deadlock")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        """Cancel whatever still runs on the loop, stop it and join the thread."""

        async def cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.loop.is_closed():
            return
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            self.call(cancel_rest(), timeout_s=5.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self.loop.close()


def forward_headers(headers: Any) -> CIMultiDict[str]:
    """`headers` without the hop-by-hop ones (repeated headers kept, in order)."""
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP)


def text_response(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n")


class _Proxy:
    """What both proxies share: the loop thread, an aiohttp server on 127.0.0.1 (a port the kernel
    picks) whose every route goes to `_handle`, and one client session towards the upstream."""

    def __init__(self, upstream_url: str, *, timeout_s: float = 30.0) -> None:
        self.upstream_url = upstream_url.rstrip("/")
        self.timeout_s = timeout_s
        self.url = ""
        self._lock = threading.Lock()  # guards state that the test thread reads or sets
        self._thread: LoopThread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Self:
        """Listen on 127.0.0.1 at a free port; returns once connections are accepted (`self.url`)."""
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        self._thread = LoopThread(type(self).__name__)
        try:
            self.url = self._thread.call(self._astart())
        except BaseException:
            self._thread.close()
            raise
        return self

    def stop(self) -> None:
        """Answer or cut whatever is pending, close every connection, stop the loop. Idempotent."""
        if self._thread is None or self._stopped:
            return
        self._stopped = True
        try:
            self._thread.call(self._astop(), timeout_s=SHUTDOWN_TIMEOUT_S + 10.0)
        finally:
            self._thread.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._thread is None or self._stopped:
            coro.close()
            raise RuntimeError(f"{type(self).__name__} is not running")
        return self._thread.call(coro)

    async def _astart(self) -> str:
        self._session = aiohttp.ClientSession(
            # limit=0: the service's gang bind barrier keeps many calls open at once; ssl=False: the
            # loopback kube-apiserver's certificate is self-signed (ignored for http upstreams).
            connector=aiohttp.TCPConnector(limit=0, ssl=False),
            auto_decompress=False,  # bodies pass through as bytes, Content-Encoding and all
            trace_configs=[self._trace_config()],
        )
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    async def _astop(self) -> None:
        await self._before_stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _before_stop(self) -> None:
        """Answer or cut requests that would otherwise keep the server's shutdown waiting."""

    def _trace_config(self) -> aiohttp.TraceConfig:
        # A request's `trace_request_ctx` may carry a future set once its headers are on the wire:
        # ExtenderProxy.release() waits for it so that released binds reach the upstream in order.
        async def headers_sent(_s: aiohttp.ClientSession, ctx: SimpleNamespace, _p: Any) -> None:
            sent = getattr(ctx, "trace_request_ctx", None)
            if isinstance(sent, asyncio.Future) and not sent.done():
                sent.set_result(None)

        config = aiohttp.TraceConfig()
        config.on_request_headers_sent.append(headers_sent)
        return config

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    def _upstream(self, request: web.Request) -> str:
        return self.upstream_url + request.rel_url.raw_path_qs

    def _send_upstream(
        self, request: web.Request, body: bytes, timeout: aiohttp.ClientTimeout, **kw: Any
    ) -> Any:
        """The request as it came (method, path and query, headers but hop-by-hop ones, body), to the
        upstream; awaited or used with `async with` by the caller."""
        assert self._session is not None
        return self._session.request(
            request.method,
            self._upstream(request),
            headers=forward_headers(request.headers),
            data=body or None,
            skip_auto_headers=NO_AUTO_HEADERS,
            allow_redirects=False,
            timeout=timeout,
            **kw,
        )


# -- kube-scheduler -> service ---------------------------------------------------------------------


@dataclass
class _HeldBind:
    key: str  # "namespace/name"
    go: asyncio.Future[bool]  # True: forward it; False: answer 502 (the proxy stops)
    sent: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def pod_key(body: bytes) -> str:
    """ "namespace/name" of the pod an extender call is about, or "" when the body names none.

    ExtenderArgs and ExtenderPreemptionArgs carry the whole pod (`Pod.metadata`);
    ExtenderBindingArgs carries `PodNamespace` and `PodName`.
    """
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(doc, dict):
        return ""
    pod = doc.get("Pod") or doc.get("pod")
    if isinstance(pod, dict):
        meta = pod.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta['name']}" if meta.get("name") else ""
    if doc.get("PodName"):
        return f"{doc.get('PodNamespace', '')}/{doc['PodName']}"
    return ""


class ExtenderProxy(_Proxy):
    """Plain HTTP between kube-scheduler and the service: forwards every request (method, path, query,
    headers but the hop-by-hop ones and Host, body) and returns the upstream's status, headers and body.

    - `hold_binds(True)`: POSTs whose path ends with "/bind" wait in the proxy until `release()`
      (or `hold_binds(False)`, which releases them all). Released binds are dispatched in arrival
      order, each after the previous one's request headers reached the upstream, but not one after
      the other's answer: the service's gang bind barrier answers a gang's binds only once all of
      them arrived, so waiting for answers would deadlock.
    - `calls()`: (verb, "namespace/name" or "", time.monotonic()) for every request, on arrival.
    - The upstream unreachable (killed service), or silent for `timeout_s`: 502 with a one-line text
      body, which kube-scheduler treats as an extender error. `stop()` answers held binds with 502.
    """

    def __init__(self, upstream_url: str, *, timeout_s: float = 30.0) -> None:
        super().__init__(upstream_url, timeout_s=timeout_s)
        self._holding = False
        self._held: list[_HeldBind] = []  # touched on the loop only
        self._calls: list[tuple[str, str, float]] = []

    # -- control (any thread) --------------------------------------------------------------------

    def hold_binds(self, on: bool) -> None:
        """Hold /bind POSTs from now on (True), or stop holding and release every held one (False)."""
        with self._lock:
            self._holding = on
        if not on and self._thread is not None and not self._stopped:
            self.release()

    def held(self) -> list[str]:
        """The held binds as "namespace/name", in arrival order."""

        async def keys() -> list[str]:
            return [h.key for h in self._held]

        return self._call(keys())

    def release(self, n: int | None = None) -> list[str]:
        """Forward the first `n` held binds (all when None) in arrival order; returns their keys.

        Returns once each is on its way to the upstream; each caller then gets the upstream's reply
        (or 502 if the upstream is gone).
        """

        async def release() -> list[str]:
            count = len(self._held) if n is None else max(0, min(n, len(self._held)))
            batch, self._held[:count] = self._held[:count], []
            for h in batch:
                if not h.go.done():
                    h.go.set_result(True)
                # Its headers on the wire (or its failure) before the next one goes.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(h.sent), timeout=1.0)
            return [h.key for h in batch]

        return self._call(release())

    def calls(self) -> list[tuple[str, str, float]]:
        """(verb, "namespace/name" or "", monotonic arrival time) of every request seen so far."""
        with self._lock:
            return list(self._calls)

    # -- serving ---------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        verb = request.path.rstrip("/").rsplit("/", 1)[-1]
        key = pod_key(body)
        with self._lock:
            self._calls.append((verb, key, time.monotonic()))
            holding = self._holding
        loop = asyncio.get_running_loop()
        sent: asyncio.Future[None] | None = None
        if holding and request.method == "POST" and request.path.endswith("/bind"):
            held = _HeldBind(key, loop.create_future())
            self._held.append(held)
            if not await held.go:
                return text_response(502, f"ExtenderProxy stopped while holding the bind of {key}")
            sent = held.sent
        try:
            return await self._forward(request, body, sent)
        finally:
            if sent is not None and not sent.done():
                sent.set_result(None)

    async def _forward(
        self, request: web.Request, body: bytes, sent: asyncio.Future[None] | None
    ) -> web.Response:
        try:
            async with self._send_upstream(
                request, body, aiohttp.ClientTimeout(total=self.timeout_s), trace_request_ctx=sent
            ) as up:
                reply = await up.read()
                return web.Response(status=up.status, body=reply, headers=forward_headers(up.headers))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return text_response(502, f"ExtenderProxy: upstream {self.upstream_url} unreachable: {exc!r}")

    async def _before_stop(self) -> None:
        held, self._held = self._held, []
        for h in held:
            if not h.go.done():
                h.go.set_result(False)
        await asyncio.sleep(0)  # let them answer before the server stops


# -- service -> kube-apiserver ---------------------------------------------------------------------


@dataclass
class _Watch:
    transport: asyncio.Transport | None  # the downstream connection, aborted by cut_watches()
    pump: asyncio.Task[None]
    open: bool = True  # still counted in watches_open


def is_watch(request: web.Request) -> bool:
    return request.query.get("watch", "").lower() in ("true", "1") or "/watch/" in request.path


def is_binding(request: web.Request) -> bool:
    """A pod binding POST: the pods/NAME/binding subresource (what the service and kube-scheduler
    send), or the namespaced `bindings` collection some clients use for the same thing."""
    path = request.path.rstrip("/")
    return request.method == "POST" and (path.endswith("/binding") or path.endswith("/bindings"))


def status_body(code: int, message: str) -> bytes:
    """A Kubernetes Status object, as the API server answers a failed request."""
    return orjson.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": STATUS_REASONS.get(code, "Unknown"),
            "code": code,
        }
    )


class ApiProxy(_Proxy):
    """Plain HTTP in, HTTPS (certificate not verified) or HTTP out, between the service and
    kube-apiserver. The Authorization header passes through; `token` is for `write_kubeconfig()`.

    Responses are streamed chunk by chunk (watches are long-lived chunked streams; lists of several
    MB are not buffered whole). Faults, each a thread-safe setter:

    - `delay_bindings_s(x)`: pod binding POSTs (…/pods/NAME/binding, or …/bindings) wait x s first.
    - `fail_bindings(fraction, status)`: that fraction of binding POSTs, drawn from a seeded
      random.Random (one draw per binding while the fraction is > 0), are answered by the proxy
      with `status` and a Kubernetes Status body and never reach the API server. The delay, if
      any, applies to them too (a slow server that then fails).
    - `delay_pod_watches_s(x)`: every event on a pod watch reaches the client x s after the API server
      sent it, in order (a watch that lags another client's, as a busy process's does).
    - `cut_watches()`: aborts every open watch's connection mid-stream (no terminating chunk),
      as a killed TCP connection would; new watches work.
    - `refuse(True)`: every request is refused by closing its connection without a response (the
      TCP connect itself succeeds): the service's client sees a server disconnect, as when the API
      server dies mid-request. Open watches stay unless `cut_watches=True` is passed too.

    An unreachable upstream gets a 502 with a Status body.
    """

    def __init__(self, upstream_url: str, *, token: str, timeout_s: float = 30.0, seed: int = 0) -> None:
        super().__init__(upstream_url, timeout_s=timeout_s)
        self.token = token
        self._rng = random.Random(seed)
        self._delay_s = 0.0
        self._pod_watch_delay_s = 0.0
        self._fail_fraction = 0.0
        self._fail_status = 503
        self._refusing = False
        self._watches: list[_Watch] = []  # touched on the loop only
        self._counts = dict.fromkeys(
            (
                "requests",
                "bindings_forwarded",
                "bindings_delayed",
                "bindings_failed",
                "watches_open",
                "watches_cut",
                "refused",
            ),
            0,
        )

    # -- control (any thread) --------------------------------------------------------------------

    def delay_bindings_s(self, delay_s: float) -> None:
        """Binding POSTs arriving from now on wait `delay_s` seconds before being forwarded."""
        with self._lock:
            self._delay_s = max(0.0, delay_s)

    def delay_pod_watches_s(self, delay_s: float) -> None:
        """Pod watch events the API server sends from now on reach the client `delay_s` seconds late."""
        with self._lock:
            self._pod_watch_delay_s = max(0.0, delay_s)

    def fail_bindings(self, fraction: float, status: int = 503, *, seed: int | None = None) -> None:
        """Answer `fraction` (0..1) of binding POSTs with `status` ourselves; `seed` restarts the draws."""
        with self._lock:
            self._fail_fraction = min(1.0, max(0.0, fraction))
            self._fail_status = status
            if seed is not None:
                self._rng.seed(seed)

    def seed(self, seed: int) -> None:
        """Restart the failure draws from `seed`."""
        with self._lock:
            self._rng.seed(seed)

    def refuse(self, on: bool, *, cut_watches: bool = False) -> None:
        """Refuse every request (close its connection unanswered) while on; `cut_watches=True` also
        cuts the open watches, for a full outage."""
        with self._lock:
            self._refusing = on
        if on and cut_watches:
            self.cut_watches()

    def cut_watches(self) -> int:
        """Abort every open watch stream; returns how many were cut."""

        async def cut() -> int:
            watches = list(self._watches)
            for w in watches:
                self._close_watch(w)
            with self._lock:
                self._counts["watches_cut"] += len(watches)
            return len(watches)

        return self._call(cut())

    def counts(self) -> dict[str, int]:
        """requests, bindings_forwarded, bindings_delayed, bindings_failed, watches_open, watches_cut,
        refused (requests closed unanswered by refuse())."""
        with self._lock:
            return dict(self._counts)

    def write_kubeconfig(self, path: str | Path) -> Path:
        """A kubeconfig whose server is this proxy (plain HTTP) and whose user has the token."""
        if not self.url:
            raise RuntimeError("ApiProxy.write_kubeconfig() before start(): no URL yet")
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e-proxy", "cluster": {"server": self.url}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "e2e-proxy", "context": {"cluster": "e2e-proxy", "user": "admin"}}],
            "current-context": "e2e-proxy",
        }
        path = Path(path)
        path.write_text(yaml.safe_dump(cfg))
        return path

    # -- serving ---------------------------------------------------------------------------------

    def _count(self, name: str, delta: int = 1) -> None:
        with self._lock:
            self._counts[name] += delta

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            self._counts["requests"] += 1
            refusing = self._refusing
        if refusing:
            self._count("refused")
            return self._hang_up(request)
        body = await request.read()
        if is_binding(request):
            with self._lock:
                fail = self._fail_fraction > 0 and self._rng.random() < self._fail_fraction
                status, delay_s = self._fail_status, self._delay_s
            if delay_s > 0:
                self._count("bindings_delayed")
                await asyncio.sleep(delay_s)
            if fail:
                self._count("bindings_failed")
                return web.Response(
                    status=status,
                    body=status_body(status, "injected by ApiProxy"),
                    content_type="application/json",
                )
            self._count("bindings_forwarded")
        return await self._forward(request, body)

    def _hang_up(self, request: web.Request) -> web.StreamResponse:
        # Closing the transport now means aiohttp's later attempt to write this response finds the
        # connection gone and gives up quietly; the client gets no status line at all.
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=503)

    async def _forward(self, request: web.Request, body: bytes) -> web.StreamResponse:
        watch = is_watch(request)
        # A watch lives as long as the API server keeps it (minutes): only connecting is bounded.
        timeout = (
            aiohttp.ClientTimeout(total=None, sock_connect=self.timeout_s)
            if watch
            else aiohttp.ClientTimeout(total=self.timeout_s)
        )
        try:
            up = await self._send_upstream(request, body, timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return web.Response(
                status=502,
                body=status_body(502, f"ApiProxy: upstream {self.upstream_url} unreachable: {exc!r}"),
                content_type="application/json",
            )
        try:
            headers = forward_headers(up.headers)
            if up.content_length is not None and not watch:
                headers["Content-Length"] = str(up.content_length)
            resp = web.StreamResponse(status=up.status, reason=up.reason, headers=headers)
            await resp.prepare(request)
            if watch:
                await self._stream_watch(request, up, resp)
            else:
                try:
                    await self._pump(up, resp)
                except (aiohttp.ClientError, TimeoutError, OSError):
                    # Upstream or downstream broke mid-body: the client must see a truncated body.
                    if request.transport is not None:
                        request.transport.abort()
            return resp
        finally:
            up.close()

    async def _pump(self, up: aiohttp.ClientResponse, resp: web.StreamResponse) -> None:
        async for chunk in up.content.iter_any():  # each chunk as it comes, never the whole body
            await resp.write(chunk)

    async def _pump_late(self, up: aiohttp.ClientResponse, resp: web.StreamResponse) -> None:
        """`_pump`, each chunk written `delay_pod_watches_s` after it arrived (read at its arrival)."""
        loop = asyncio.get_running_loop()
        late: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()

        async def write() -> None:
            while True:
                due, chunk = await late.get()
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                if chunk is None:
                    return
                await resp.write(chunk)

        writer = asyncio.create_task(write())
        try:
            async for chunk in up.content.iter_any():
                with self._lock:
                    delay_s = self._pod_watch_delay_s
                late.put_nowait((loop.time() + delay_s, chunk))
                if writer.done():
                    break  # the client went away: its error is raised below
            late.put_nowait((loop.time(), None))
            await writer
        finally:
            writer.cancel()

    async def _stream_watch(
        self, request: web.Request, up: aiohttp.ClientResponse, resp: web.StreamResponse
    ) -> None:
        pods = request.path.rstrip("/").endswith("/pods")
        pump = self._pump_late(up, resp) if pods else self._pump(up, resp)
        w = _Watch(request.transport, asyncio.create_task(pump))
        self._watches.append(w)
        self._count("watches_open")
        try:
            while not w.pump.done():
                await asyncio.wait({w.pump}, timeout=1.0)
                # A quiet watch whose client went away would otherwise hold its upstream until the
                # API server's own timeout; aiohttp does not cancel handlers on disconnect.
                if request.transport is None or request.transport.is_closing():
                    w.pump.cancel()
            if not w.pump.cancelled() and w.pump.exception() is not None and request.transport is not None:
                request.transport.abort()  # upstream broke: end the client's stream abruptly too
        finally:
            if not w.pump.done():  # this handler itself was cancelled (the proxy stops)
                w.pump.cancel()
            self._forget_watch(w)

    def _close_watch(self, w: _Watch) -> None:
        """Abort the client's connection (no terminating chunk) and stop pumping."""
        if w.transport is not None:
            w.transport.abort()
        w.pump.cancel()
        self._forget_watch(w)  # now, so that counts() right after cut_watches() shows it gone

    def _forget_watch(self, w: _Watch) -> None:
        if w.open:
            w.open = False
            self._watches.remove(w)
            self._count("watches_open", -1)

    async def _before_stop(self) -> None:
        for w in list(self._watches):
            self._close_watch(w)
        await asyncio.sleep(0)
