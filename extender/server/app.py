"""The aiohttp service kube-scheduler calls: decode, decide, encode, and the gang bind barrier.

Routes: POST /filter, /prioritize, /bind, /preempt (so a KubeSchedulerConfiguration's urlPrefix
is the service's base URL); GET /healthz, /readyz, /metrics, /debug/gangs[/{ns}/{name}].

Bad input is HTTP 400 with a one-line reason; an internal fault is answered in the verb's Error
field (HTTP 200, as kube-scheduler expects) and logged with the pod's namespace/name. A bind
that reaches a gang's barrier waits on a future that the release or the expiry ticker resolves.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from extender.config import Settings
from extender.gang.permits import GangPermits
from extender.model.keys import GroupKey, PodKey, pod_key
from extender.placement import api as placement
from extender.scheduling.scheduler import (
    BindVerdict,
    Effect,
    FilterDecision,
    Scheduler,
    UnknownNodesError,
    Verdict,
)
from extender.server import wire
from extender.server.metrics import Metrics
from extender.state.source import BindError, ClusterSource
from extender.state.store import ClusterStore

log = logging.getLogger(__name__)

STORE = web.AppKey("store", ClusterStore)
SCHEDULER = web.AppKey("scheduler", Scheduler)
SOURCE = web.AppKey("source", object)
SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", Metrics)
BARRIER = web.AppKey("barrier", object)
READY = web.AppKey("ready", dict)

Clock = Callable[[], float]


class Barrier:
    """Waiting bind calls, by pod; resolved with "" (bound) or an error message.

    Each waiter keeps the UID kube-scheduler sent (the release binds exactly that pod) and when
    its call started (kube-scheduler's httpTimeout runs from there).
    """

    def __init__(self) -> None:
        self.waiters: dict[PodKey, tuple[asyncio.Future[str], str, float]] = {}

    def wait(self, key: PodKey, *, uid: str, started: float) -> asyncio.Future[str]:
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        old = self.waiters.get(key)
        if old is not None and not old[0].done():
            old[0].set_result(f"superseded by a newer bind call for {key}")
        self.waiters[key] = (fut, uid, started)
        return fut

    def uid(self, key: PodKey) -> str:
        found = self.waiters.get(key)
        return found[1] if found else ""

    def earliest_start(self, keys: list[PodKey], default: float) -> float:
        return min((self.waiters[k][2] for k in keys if k in self.waiters), default=default)

    def resolve(self, key: PodKey, error: str) -> None:
        found = self.waiters.pop(key, None)
        if found is not None and not found[0].done():
            found[0].set_result(error)


# kube-scheduler's clock for a bind call starts before ours; answer this much before its httpTimeout
_TIMEOUT_MARGIN_S = 0.5


def _bind_budget(app: web.Application, started: float) -> float:
    """Seconds left before kube-scheduler gives up on a bind call that started at `started`."""
    timeout_s = app[SETTINGS].cluster.http_timeout_s
    return max(0.1, timeout_s - _TIMEOUT_MARGIN_S - (time.monotonic() - started))


def _text_400(reason: str) -> web.Response:
    return web.Response(status=400, text=reason + "\n", content_type="text/plain")


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


def _pod_ref(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def _filter_reply(args: wire.ExtenderArgs, decision: FilterDecision, reason_nodes: int) -> bytes:
    if decision.verdict is Verdict.PASS:
        return wire.filter_result(args=args, passed=decision.passed, failed=None, unresolvable=None)
    # A bounded sample carries the reason: kube-scheduler 1.20 reads only FailedNodes, newer ones
    # prefer FailedAndUnresolvableNodes when a node is in both; nodes left out count as unresolvable.
    sample = args.node_names[:reason_nodes]
    failed = dict.fromkeys(sample, decision.reason)
    unresolvable = failed if decision.unresolvable else None
    return wire.filter_result(args=args, passed=[], failed=failed, unresolvable=unresolvable)


async def _handle(
    request: web.Request, verb: str, work: Callable[[bytes], Awaitable[web.Response]]
) -> web.Response:
    metrics = request.app[METRICS]
    start = time.perf_counter()
    status = 200
    try:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            limit = request.app[SETTINGS].server.max_body_bytes
            status = 400
            return _text_400(f"request body is larger than --max-body-bytes ({limit} bytes)")
        try:
            resp = await work(body)
        except (wire.WireError, UnknownNodesError) as exc:
            status = 400
            return _text_400(str(exc))
        status = resp.status
        return resp
    finally:
        metrics.observe(verb, status, time.perf_counter() - start)


async def handle_filter(request: web.Request) -> web.Response:
    app = request.app
    scheduler = app[SCHEDULER]
    reason_nodes = app[SETTINGS].gang.reason_nodes

    async def work(body: bytes) -> web.Response:
        pod = wire.peek_pod(body)
        if pod is not None:
            planned = scheduler.planned_node_for(pod)
            if planned is not None and wire.names_contain(body, planned) and scheduler._row_usable(planned):
                app[METRICS].fast_path.inc()
                return _json(
                    orjson.dumps(
                        {
                            "Nodes": None,
                            "NodeNames": [planned],
                            "FailedNodes": {},
                            "FailedAndUnresolvableNodes": {},
                            "Error": "",
                        }
                    )
                )
        args = wire.parse_extender_args(body)
        try:
            decision = scheduler.filter(args.pod, args.node_names)
        except (UnknownNodesError, wire.WireError):
            raise
        except ValueError as exc:
            raise wire.WireError(str(exc)) from None
        except Exception as exc:
            log.exception("filter failed for pod %s", _pod_ref(args.pod))
            app[METRICS].errors.labels("filter").inc()
            return _json(wire.filter_error(f"internal error in gang-extender filter: {exc}"))
        _spawn_effects(app, decision.effects)
        return _json(_filter_reply(args, decision, reason_nodes))

    return await _handle(request, "filter", work)


async def handle_prioritize(request: web.Request) -> web.Response:
    app = request.app

    async def work(body: bytes) -> web.Response:
        args = wire.parse_extender_args(body)
        try:
            scores = app[SCHEDULER].prioritize(args.pod, args.node_names)
        except (UnknownNodesError, wire.WireError):
            raise
        except ValueError as exc:
            raise wire.WireError(str(exc)) from None
        except Exception:
            # prioritize errors are ignored by kube-scheduler; give every node 0 and log it
            log.exception("prioritize failed for pod %s", _pod_ref(args.pod))
            app[METRICS].errors.labels("prioritize").inc()
            scores = [(n, 0) for n in args.node_names]
        return _json(wire.prioritize_result(scores))

    return await _handle(request, "prioritize", work)


async def handle_bind(request: web.Request) -> web.Response:
    app = request.app

    async def work(body: bytes) -> web.Response:
        args = wire.parse_binding_args(body)
        try:
            error = await _bind(app, args)
        except Exception as exc:
            log.exception("bind failed for pod %s/%s", args.pod_namespace, args.pod_name)
            app[METRICS].errors.labels("bind").inc()
            error = f"internal error in gang-extender bind: {exc}"
        return _json(wire.binding_result(error))

    return await _handle(request, "bind", work)


async def _bind(app: web.Application, args: wire.BindingArgs) -> str:
    scheduler = app[SCHEDULER]
    source: ClusterSource = app[SOURCE]  # type: ignore[assignment]
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    started = time.monotonic()
    key = pod_key(args.pod_namespace, args.pod_name)
    decision = scheduler.bind(
        namespace=args.pod_namespace, name=args.pod_name, uid=args.pod_uid, node=args.node
    )
    if decision.verdict is BindVerdict.REFUSE:
        return decision.message
    if decision.verdict is BindVerdict.NOW:
        error = await _bind_one(
            source, key, uid=args.pod_uid, node=args.node, budget_s=_bind_budget(app, started)
        )
        if error:
            scheduler.bind_failed(key)
        return error
    if decision.verdict is BindVerdict.WAIT:
        fut = barrier.wait(key, uid=args.pod_uid, started=started)
        _kick_ticker(app)
        try:
            return await fut
        except asyncio.CancelledError:
            scheduler.permits.depart(key)
            raise
    # RELEASE: this call completed the barrier; bind every waiting member together
    assert decision.gang is not None
    own = barrier.wait(key, uid=args.pod_uid, started=started)
    await _release(app, decision.gang, decision.members)
    return await own


async def _bind_one(source: ClusterSource, key: PodKey, *, uid: str, node: str, budget_s: float) -> str:
    """Bind one pod through the source within the budget; "" on success, else the reason."""
    ns, name = key.split("/", 1)
    try:
        await asyncio.wait_for(source.bind_pod(namespace=ns, name=name, uid=uid, node=node), budget_s)
    except BindError as exc:
        return f"binding {key} to {node}: {exc}"
    except TimeoutError:
        return f"binding {key} to {node} did not finish within {budget_s:.1f}s"
    except Exception as exc:
        log.exception("binding %s to %s failed", key, node)
        return f"internal error binding {key} to {node}: {exc}"
    return ""


async def _release(app: web.Application, gang: GroupKey, members: list[tuple[PodKey, str]]) -> None:
    """Bind every member of a completed barrier, answering each waiting call before its timeout.

    Binds still in flight when the earliest caller's budget runs out are answered with that and
    keep going; the gang is recorded as bound once every bind has finished.
    """
    scheduler = app[SCHEDULER]
    source: ClusterSource = app[SOURCE]  # type: ignore[assignment]
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    store = app[STORE]
    keys = [pk for pk, _ in members]
    budget_s = _bind_budget(app, barrier.earliest_start(keys, time.monotonic()))
    loop = asyncio.get_running_loop()
    tasks: dict[PodKey, asyncio.Task[str]] = {}
    for pk, node in members:
        rec = store.pods.get(pk)
        uid = barrier.uid(pk) or (rec.uid if rec else "")
        # the budget is enforced below, per caller, not per bind: a late bind is not cancelled
        tasks[pk] = loop.create_task(_bind_one(source, pk, uid=uid, node=node, budget_s=3600.0))
    _, pending = await asyncio.wait(tasks.values(), timeout=budget_s)

    def finish() -> None:
        results = {pk: t.result() for pk, t in tasks.items()}
        bound = [pk for pk, err in results.items() if not err]
        failed = [pk for pk, err in results.items() if err]
        _spawn_effects(app, scheduler.gang_bound(gang, bound, failed))
        if bound:
            app[METRICS].gangs_bound.inc()

    if not pending:
        finish()
        for pk, t in tasks.items():
            barrier.resolve(pk, t.result())
        return
    for pk, t in tasks.items():
        late = f"binding {pk} was still in flight after {budget_s:.1f}s; it completes in the background"
        barrier.resolve(pk, t.result() if t.done() else late)

    async def finish_later() -> None:
        await asyncio.wait(pending)
        finish()

    _track(app, loop.create_task(finish_later()))


async def handle_preempt(request: web.Request) -> web.Response:
    app = request.app

    async def work(body: bytes) -> web.Response:
        args = wire.parse_preemption_args(body)
        return _json(wire.preemption_result(app[SCHEDULER].preempt(args.pod, args.victims)))

    return await _handle(request, "preempt", work)


async def handle_healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def handle_readyz(request: web.Request) -> web.Response:
    ready = request.app[READY]
    if ready.get("failed"):
        return web.Response(status=503, text=f"not ready: {ready['failed']}\n")
    source = request.app[SOURCE]
    synced = source.is_synced()  # type: ignore[attr-defined]
    if synced and ready.get("kernels"):
        return web.Response(text="ready\n")
    missing = [
        what for what, ok in (("cache synced", synced), ("kernels warm", ready.get("kernels"))) if not ok
    ]
    return web.Response(status=503, text="not ready: waiting for " + " and ".join(missing) + "\n")


async def handle_metrics(request: web.Request) -> web.Response:
    m = request.app[METRICS]
    store = request.app[STORE]
    m.set_sizes(
        nodes=len(store.node_rows),
        pods=len(store.pods),
        reservations=len(store.reservations),
        gangs=len(request.app[SCHEDULER].permits.gangs),
    )
    body, content_type = m.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


async def handle_debug_gangs(request: web.Request) -> web.Response:
    return _json(orjson.dumps({"gangs": request.app[SCHEDULER].describe_all()}))


async def handle_debug_gang(request: web.Request) -> web.Response:
    key = GroupKey(f"{request.match_info['namespace']}/{request.match_info['name']}")
    found = request.app[SCHEDULER].describe(key)
    if found is None:
        return web.Response(status=404, text=f"no gang {key} is known to the extender\n")
    return _json(orjson.dumps(found))


# ------------------------------------------------------------------ effects and ticker
def _track(app: web.Application, task: asyncio.Task[Any]) -> None:
    """Keep a fire-and-forget task referenced until it ends (the loop holds only weak references)."""
    app[READY].setdefault("tasks", set()).add(task)
    task.add_done_callback(app[READY]["tasks"].discard)


def _spawn_effects(app: web.Application, effects: list[Effect]) -> None:
    if effects:
        _track(app, asyncio.get_running_loop().create_task(_run_effects(app, effects)))


async def _run_effects(app: web.Application, effects: list[Effect]) -> None:
    source = app[SOURCE]
    store = app[STORE]
    for e in effects:
        try:
            if e.kind == "nudge":
                await source.nudge_pod(namespace=e.namespace, name=e.name, value=e.data["value"])  # type: ignore[attr-defined]
            elif e.kind == "condition":
                await source.set_pod_condition(namespace=e.namespace, name=e.name, condition=e.data)  # type: ignore[attr-defined]
            elif e.kind == "event":
                rec = store.pods.get(pod_key(e.namespace, e.name))
                await source.emit_event(  # type: ignore[attr-defined]
                    namespace=e.namespace,
                    name=e.name,
                    uid=rec.uid if rec else "",
                    kind="Pod",
                    reason=e.data["reason"],
                    message=e.data["message"],
                    event_type=e.data.get("type", "Normal"),
                )
            elif e.kind == "group-status":
                status = e.data["status"]
                for cond in status.get("conditions", ()):
                    cond.setdefault("lastTransitionTime", _now_rfc3339())
                await source.patch_group_status(  # type: ignore[attr-defined]
                    group=e.data["group"],
                    kind=e.data["kind"],
                    namespace=e.namespace,
                    name=e.name,
                    status=status,
                )
        except Exception:
            log.exception("writing %s for %s/%s failed", e.kind, e.namespace, e.name)


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _kick_ticker(app: web.Application) -> None:
    event: asyncio.Event = app[READY]["tick"]
    event.set()


async def _expiry_ticker(app: web.Application) -> None:
    """Fails gangs whose barrier deadline passed; sleeps until the next deadline or a new waiter."""
    scheduler = app[SCHEDULER]
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    tick: asyncio.Event = app[READY]["tick"]
    while True:
        try:
            for waiting, msg, effects in scheduler.expire():
                app[METRICS].gang_timeouts.inc()
                for pk in waiting:
                    barrier.resolve(pk, msg)
                _spawn_effects(app, effects)
        except Exception:
            # one bad gang must not stop the ticker: every other waiting bind would then hang
            log.exception("expiring gang barriers failed")
        deadlines = [e.deadline for e in scheduler.permits.gangs.values() if e.deadline is not None]
        # capped: the clock may run faster than real time (the simulator's does)
        timeout = min(0.1, max(0.0, min(deadlines) - scheduler.permits.clock()) + 0.01) if deadlines else None
        tick.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(tick.wait(), timeout)


# ------------------------------------------------------------------ app
async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    app[READY]["tick"] = asyncio.Event()
    source = app[SOURCE]
    runner = asyncio.get_running_loop().create_task(source.run(app[STORE]))  # type: ignore[attr-defined]
    ticker = asyncio.get_running_loop().create_task(_expiry_ticker(app))

    async def warm() -> None:
        seconds = await asyncio.get_running_loop().run_in_executor(None, placement.warm_up)
        app[READY]["kernels"] = True
        log.info("placement kernels warm in %.2fs", seconds)

    warmer = asyncio.get_running_loop().create_task(warm())

    def watch(what: str) -> Callable[[asyncio.Task[Any]], None]:
        def done(task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                return
            exc = task.exception()
            reason = f"{what} stopped: {exc!r}" if exc else f"{what} stopped"
            # a stale cache over-commits and waiting binds hang: stop being ready, say why
            app[READY]["failed"] = reason
            log.error("%s", reason, exc_info=exc)

        return done

    runner.add_done_callback(watch("the cluster source"))
    ticker.add_done_callback(watch("the gang barrier ticker"))
    try:
        yield
    finally:
        for task in (runner, ticker, warmer):
            task.cancel()
        for task in (runner, ticker, warmer):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def build_app(settings: Settings, *, source: ClusterSource, clock: Clock = time.monotonic) -> web.Application:
    app = web.Application(client_max_size=settings.server.max_body_bytes)
    store = ClusterStore()
    attach = getattr(source, "attach", None)
    if attach is not None:
        attach(store)  # an embedded cluster is in the store before the first request
    permits = GangPermits(
        wait_s=settings.gang.wait_s,
        backoff_initial_s=settings.gang.backoff_initial_s,
        backoff_max_s=settings.gang.backoff_max_s,
        clock=clock,
    )
    app[SETTINGS] = settings
    app[STORE] = store
    app[SOURCE] = source
    scheduler = Scheduler(store, permits, reason_nodes=settings.gang.reason_nodes)
    barrier = Barrier()

    def abort(pods: list[PodKey], message: str) -> None:
        for pk in pods:
            barrier.resolve(pk, message)

    scheduler.on_abort = abort
    app[SCHEDULER] = scheduler
    app[METRICS] = Metrics()
    app[BARRIER] = barrier
    app[READY] = {}
    app.cleanup_ctx.append(_lifecycle)
    app.router.add_post("/filter", handle_filter)
    app.router.add_post("/prioritize", handle_prioritize)
    app.router.add_post("/bind", handle_bind)
    app.router.add_post("/preempt", handle_preempt)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/debug/gangs", handle_debug_gangs)
    app.router.add_get("/debug/gangs/{namespace}/{name}", handle_debug_gang)
    return app
