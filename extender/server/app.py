"""The aiohttp service kube-scheduler calls: decode, decide, encode, and the gang bind barrier.

Routes: POST /filter, /prioritize, /bind, /preempt (so a KubeSchedulerConfiguration's urlPrefix
is the service's base URL); GET /healthz, /readyz, /metrics, /debug/gangs[/{ns}/{name}], /debug/queues.

Bad input is HTTP 400 with a one-line reason; an internal fault is answered in the verb's Error
field (HTTP 200, as kube-scheduler expects; prioritize gives every node 0 and preempt, whose reply has
no Error field, offers no node, so no one is evicted), logged with the pod's namespace/name and counted
in gang_extender_internal_errors_total. A bind
that reaches a gang's barrier waits on a future that the release or the expiry ticker resolves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import ipaddress
import logging
import signal
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import orjson
from aiohttp import web

from extender.config import ServerSettings, Settings
from extender.model.keys import GroupKey, PodKey, pod_key
from extender.model.resources import QuantityError
from extender.placement import api as placement
from extender.scheduling import lagging, leadership
from extender.scheduling.decisions import (
    BindDecision,
    BindVerdict,
    Effect,
    FilterDecision,
    UnknownNodesError,
    Verdict,
)
from extender.scheduling.disruption import DISRUPTION_TARGET, PREEMPTED_BY_GANG, GangDisruption
from extender.scheduling.holds import HoldSettings
from extender.scheduling.ledger import Answer, GangLedger, Release
from extender.scheduling.podgrouper import Podgrouper
from extender.scheduling.scheduler import Scheduler
from extender.server import wire
from extender.server.metrics import Metrics
from extender.server.passthrough import Passthrough
from extender.state.source import (
    BindError,
    ClusterSource,
    EvictionFailed,
    EvictionUnanswered,
    SourceFatalError,
)
from extender.state.store import ClusterStore

log = logging.getLogger(__name__)

STORE = web.AppKey("store", ClusterStore)
SCHEDULER = web.AppKey("scheduler", Scheduler)
SOURCE = web.AppKey("source", object)
SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", Metrics)
BARRIER = web.AppKey("barrier", object)
READY = web.AppKey("ready", dict)
CLOCK = web.AppKey("clock", object)
PROBE_PORT = web.AppKey("probe_port", int)  # the bound port of --probe-host; 0: no probe listener
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
PODGROUPER = web.AppKey("podgrouper", object)  # a Podgrouper, or None with --podgrouper=false
DISRUPTION = web.AppKey("disruption", GangDisruption)
PASSTHROUGH = web.AppKey("passthrough", Passthrough)

Clock = Callable[[], float]


class Barrier:
    """Waiting bind calls and release binds in flight: the server's futures, nothing else.

    Each waiter keeps its own deadline (kube-scheduler's httpTimeout from when its call started,
    less a margin), so every call is answered in time whatever happens to its gang.
    """

    def __init__(self) -> None:
        self.waiters: dict[PodKey, tuple[asyncio.Future[str], float]] = {}
        self.in_flight: dict[PodKey, asyncio.Task[str]] = {}
        self.fenced: dict[PodKey, asyncio.Future[str]] = {}
        """Waiters that wait for the start-up fence, not for a gang: resolved FENCE_OVER when it ends."""

    def wait(self, key: PodKey, *, deadline: float) -> asyncio.Future[str]:
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        old = self.waiters.get(key)
        if old is not None and not old[0].done():
            old[0].set_result(f"superseded by a newer bind call for {key}")
        self.waiters[key] = (fut, deadline)
        return fut

    def resolve(self, key: PodKey, error: str) -> None:
        found = self.waiters.pop(key, None)
        if found is not None and not found[0].done():
            found[0].set_result(error)

    def forget(self, key: PodKey, fut: asyncio.Future[str]) -> None:
        found = self.waiters.get(key)
        if found is not None and found[0] is fut:
            del self.waiters[key]

    def overdue(self, now: float) -> list[PodKey]:
        return [k for k, (fut, deadline) in self.waiters.items() if now >= deadline and not fut.done()]

    def next_deadline(self) -> float | None:
        return min((d for _, d in self.waiters.values()), default=None)


# kube-scheduler's clock for a bind call starts before ours; answer this much before its httpTimeout
_TIMEOUT_MARGIN_S = 0.5
# a bind call waits out the start-up fence only if this much of its time is left after it for the bind
_FENCE_ROOM_S = 1.0
_FENCE_OVER = "\x00the start-up fence is over"  # a fenced waiter's result: decide again
# a bind stops retrying an unreachable API server this long before its budget ends, so its answer is
# the API's last error rather than a timeout
_PERSIST_MARGIN_S = 1.0


def _deadline(app: web.Application, started: float) -> float:
    """When a bind call that started at `started` (app clock) must have its answer."""
    return started + app[SETTINGS].cluster.http_timeout_s - _TIMEOUT_MARGIN_S


def _bind_budget(app: web.Application, started: float) -> float:
    """Seconds left before kube-scheduler gives up on a bind call that started at `started`."""
    return max(0.1, _deadline(app, started) - app[CLOCK]())


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
    if decision.lagging_on:
        # an error names no plugin that rejected the pod: kube-scheduler retries it after its backoff
        error = wire.reply_reason(lagging.retry_text(decision.reason, decision.lagging_on))
        return wire.filter_result(args=args, passed=[], failed=None, unresolvable=None, error=error)
    # A bounded sample carries the reason: kube-scheduler 1.20 reads only FailedNodes, newer ones
    # prefer FailedAndUnresolvableNodes when a node is in both; nodes left out count as unresolvable.
    sample = args.node_names[:reason_nodes]
    failed = dict.fromkeys(sample, wire.reply_reason(decision.reason))
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
        except web.RequestPayloadError as exc:  # a Content-Encoding whose body does not decode
            status = 400
            encoding = request.headers.get("Content-Encoding", "")
            resp = _text_400(wire.WireError(f"request body could not be read ({encoding}): {exc}").args[0])
            resp.force_close()  # the rest of the stream cannot be trusted: the client must reconnect
            return resp
        try:
            resp = await work(body)
        except (wire.WireError, UnknownNodesError, QuantityError) as exc:
            status = 400
            return _text_400(wire.WireError(str(exc)).args[0])  # one bounded line, whatever raised it
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
            array = wire.names_array(body) if planned is not None else None
            if (
                array is not None
                and wire.names_contain(body, planned)
                and scheduler.names_known(array)  # a list that is no list of known names: 400
                and scheduler.node_usable(planned)
            ):
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
            try:
                reply = app[PASSTHROUGH].reply(body, pod)
            except UnknownNodesError:
                raise  # the caller's input: HTTP 400
            except Exception:
                log.exception("plain filter failed for pod %s; deciding in full", _pod_ref(pod))
                reply = None
            if reply is not None:
                app[METRICS].plain_fast_path.inc()
                return _json(reply)
        args = wire.parse_extender_args(body)
        try:
            decision = scheduler.filter(args.pod, args.node_names)
        except (UnknownNodesError, wire.WireError, QuantityError):
            raise  # the caller's input: HTTP 400
        except Exception as exc:
            # our fault, whatever its type: never blamed on the caller
            log.exception("filter failed for pod %s", _pod_ref(args.pod))
            app[METRICS].errors.labels("filter").inc()
            return _json(wire.filter_error(f"internal error in gang-extender filter: {exc}"))
        finally:
            _answer_dropped(app)
        _spawn_effects(app, decision.effects)
        if decision.lagging_on:
            app[METRICS].lag_retries.inc()
        return _json(_filter_reply(args, decision, reason_nodes))

    return await _handle(request, "filter", work)


async def handle_prioritize(request: web.Request) -> web.Response:
    app = request.app

    async def work(body: bytes) -> web.Response:
        args = wire.parse_extender_args(body)
        try:
            scores = app[SCHEDULER].prioritize(args.pod, args.node_names)
        except (UnknownNodesError, wire.WireError, QuantityError):
            raise
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
            if error:
                # kube-scheduler now backs the pod off or parks it as unschedulable: nudge it back
                # when its gang is planned again, as for a pod the filter turned away
                app[SCHEDULER].ledger.note_answer(
                    pod_key(args.pod_namespace, args.pod_name), turned_away=True
                )
                app[SCHEDULER].note_bind_error(pod_key(args.pod_namespace, args.pod_name), error)
        except Exception as exc:
            log.exception("bind failed for pod %s/%s", args.pod_namespace, args.pod_name)
            app[METRICS].errors.labels("bind").inc()
            error = f"internal error in gang-extender bind: {exc}"
        return _json(wire.binding_result(error))

    return await _handle(request, "bind", work)


async def _bind(app: web.Application, args: wire.BindingArgs) -> str:
    scheduler = app[SCHEDULER]
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    started = app[CLOCK]()
    key = pod_key(args.pod_namespace, args.pod_name)
    while True:
        decision = scheduler.bind(
            namespace=args.pod_namespace, name=args.pod_name, uid=args.pod_uid, node=args.node
        )
        if decision.verdict is not BindVerdict.FENCED:
            break
        error = await _wait_out_fence(app, key, decision, started)
        if error:
            return error
    _answer_dropped(app)
    verdict = decision.verdict
    if verdict is BindVerdict.REFUSE:
        return decision.message
    if verdict is BindVerdict.DONE:
        return ""
    if verdict is BindVerdict.NOW:
        source: ClusterSource = app[SOURCE]  # type: ignore[assignment]
        try:
            error, unknown = "", False
            if decision.wait_s > 0:  # its room is held; only the POST waits for the fence
                error = await _wait_out_fence(app, key, decision, started) or scheduler.fence_over(
                    key, args.node
                )
            if not error:
                error, unknown = await _bind_outcome(
                    source, key, uid=args.pod_uid, node=args.node, budget_s=_bind_budget(app, started)
                )
        except asyncio.CancelledError:
            scheduler.bind_done(key, args.node, "cancelled")
            raise
        scheduler.bind_done(key, args.node, error, unknown=unknown)
        return error
    if verdict is BindVerdict.IN_FLIGHT:
        task = barrier.in_flight.get(key)
        if task is None:
            return f"binding {key} to {args.node} is in flight; retry shortly"
        try:
            return await asyncio.wait_for(asyncio.shield(task), _bind_budget(app, started))
        except TimeoutError:
            return f"binding {key} to {args.node} is still in flight; retry shortly"
    fut = barrier.wait(key, deadline=_deadline(app, started))
    if verdict is BindVerdict.RELEASE:
        assert decision.gang is not None
        _release(app, decision.gang, decision.members)
    else:
        _kick_ticker(app)
    try:
        # the ticker answers at the deadline on the app's clock; this bounds the wait in real time too
        return await asyncio.wait_for(asyncio.shield(fut), _bind_budget(app, started))
    except TimeoutError:
        app[METRICS].waiter_deadlines.inc()
        return fut.result() if fut.done() else _overdue_message(app, key)
    finally:
        barrier.forget(key, fut)


async def _wait_out_fence(app: web.Application, key: PodKey, decision: BindDecision, started: float) -> str:
    """Wait for the start-up fence to end: "" then, or the fence's reason when it outlasts this call."""
    if app[CLOCK]() + decision.wait_s > _deadline(app, started) - _FENCE_ROOM_S:
        return decision.message  # nothing to gain by waiting: kube-scheduler retries it sooner
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    app[METRICS].fenced_binds.inc()
    fut = barrier.wait(key, deadline=_deadline(app, started))
    barrier.fenced[key] = fut
    _kick_ticker(app)
    try:
        # the ticker ends the wait on the app's clock; this bounds it in real time too
        result = await asyncio.wait_for(asyncio.shield(fut), _bind_budget(app, started))
    except TimeoutError:
        return decision.message
    finally:
        if barrier.fenced.get(key) is fut:
            del barrier.fenced[key]
        barrier.forget(key, fut)
    return "" if result == _FENCE_OVER else result


def _overdue_message(app: web.Application, key: PodKey) -> str:
    timeout_s = app[SETTINGS].cluster.http_timeout_s
    if key in app[BARRIER].fenced:  # type: ignore[attr-defined]
        return app[SCHEDULER].fence_reason(key)
    if key in app[BARRIER].in_flight:  # type: ignore[attr-defined]
        return (
            f"binding {key} was still in flight near the scheduler's httpTimeout ({timeout_s:g}s); "
            "it completes in the background"
        )
    return (
        f"{key}: no answer from its gang's bind barrier before the scheduler's httpTimeout "
        f"({timeout_s:g}s); the scheduler will retry it"
    )


async def _bind_one(source: ClusterSource, key: PodKey, *, uid: str, node: str, budget_s: float) -> str:
    """Bind one pod through the source within the budget; "" on success, else the reason."""
    return (await _bind_outcome(source, key, uid=uid, node=node, budget_s=budget_s))[0]


async def _bind_outcome(
    source: ClusterSource, key: PodKey, *, uid: str, node: str, budget_s: float
) -> tuple[str, bool]:
    """(reason, unknown): "" on success, else the reason, and whether the binding may have been
    applied all the same (no answer came).

    The bind keeps trying an API server that cannot answer for most of the budget: a POST cut off
    by an API server restart may have landed, and only a later try can tell (its 409 names the
    node), while an error now would leave the gang's other members bound and this one's place
    held for a kube-scheduler retry that never comes."""
    ns, name = key.split("/", 1)
    persist_s = max(0.0, budget_s - _PERSIST_MARGIN_S)
    bind = source.bind_pod(namespace=ns, name=name, uid=uid, node=node, persist_s=persist_s)
    try:
        await asyncio.wait_for(bind, budget_s)
    except BindError as exc:
        return f"binding {key} to {node}: {exc}", exc.unknown
    except TimeoutError:
        return f"binding {key} to {node} did not finish within {budget_s:.1f}s", True
    except Exception as exc:
        log.exception("binding %s to %s failed", key, node)
        return f"internal error binding {key} to {node}: {exc}", True
    return "", False


def _release(app: web.Application, gang: GroupKey, members: list[Release]) -> None:
    """Bind every member of a completed barrier at once.

    Each waiting call is answered with its own bind's outcome, or at its own deadline if the
    bind is still in flight then (the ticker sees to that); the ledger hears the outcome of
    every bind once all have finished, which is bounded too.
    """
    source: ClusterSource = app[SOURCE]  # type: ignore[assignment]
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    loop = asyncio.get_running_loop()
    # a bind outliving this is abandoned and counted as failed; the watch still shows the pod
    # bound if the API server did apply it, and the ledger then takes it as bound
    limit_s = 2 * app[SETTINGS].cluster.http_timeout_s
    tasks: dict[PodKey, asyncio.Task[str]] = {}
    for m in members:
        task = loop.create_task(_bind_one(source, m.pod, uid=m.uid, node=m.node, budget_s=limit_s))
        tasks[m.pod] = task
        barrier.in_flight[m.pod] = task
        task.add_done_callback(lambda t, pk=m.pod: barrier.resolve(pk, _outcome(t)))

    async def settle() -> None:
        results: dict[PodKey, str] = {}
        began = time.perf_counter()
        try:
            await asyncio.wait(tasks.values())
            app[METRICS].release_seconds.observe(time.perf_counter() - began)
        finally:
            for pk, t in tasks.items():
                results[pk] = _outcome(t) if t.done() else "abandoned"
                if barrier.in_flight.get(pk) is t:
                    del barrier.in_flight[pk]
            failed = sum(1 for e in results.values() if e)
            if failed:
                app[METRICS].release_failures.inc(failed)
            effects = app[SCHEDULER].release_done(gang, results)
            if any(not e for e in results.values()):
                app[METRICS].gangs_bound.inc()
            for seconds in app[SCHEDULER].take_bind_times():
                app[METRICS].time_to_bind.observe(seconds)
            _spawn_effects(app, effects)
            _answer_dropped(app)

    _track(app, loop.create_task(settle()))


def _outcome(task: asyncio.Task[str]) -> str:
    """A finished bind task's answer: "" when bound, else why not."""
    return "cancelled" if task.cancelled() else task.result()


async def handle_preempt(request: web.Request) -> web.Response:
    app = request.app

    async def work(body: bytes) -> web.Response:
        args = wire.parse_preemption_args(body)
        try:
            decision = app[SCHEDULER].preempt(args.pod, args.victims)
        except (UnknownNodesError, wire.WireError, QuantityError):
            raise  # the caller's input: HTTP 400
        except Exception:
            # our fault, whatever its type. The reply has no Error field, and a 500 fails the pod's
            # PostFilter (an ignorable extender would be skipped, and kube-scheduler would evict its
            # own candidates, gang members among them): no node at all is the answer that evicts no
            # one, and kube-scheduler retries the pod later.
            log.exception("preempt failed for pod %s; no node offered", _pod_ref(args.pod))
            app[METRICS].errors.labels("preempt").inc()
            return _json(wire.preemption_result({}))
        for outcome, n in decision.counts().items():
            app[METRICS].preempt_candidates.labels(outcome.value).inc(n)
        effects, app[SCHEDULER].preempt_effects = app[SCHEDULER].preempt_effects, []
        _spawn_effects(app, effects)
        return _json(wire.preemption_result(decision.victims))

    return await _handle(request, "preempt", work)


async def handle_healthz(request: web.Request) -> web.Response:
    failed = request.app[READY].get("failed")
    if failed:
        # a dead cluster source or barrier ticker never comes back: let the kubelet restart us
        return web.Response(status=503, text=f"unhealthy: {failed}\n")
    return web.Response(text="ok\n")


async def _answer_all_waiting(app: web.Application) -> None:
    """On shutdown (SIGTERM), answer every waiting bind before the process goes."""
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    for pk in list(barrier.waiters):
        barrier.resolve(pk, f"{pk}: gang-extender is shutting down; the scheduler will retry it")


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
        gangs=len(request.app[SCHEDULER].ledger.gang_keys()),
    )
    m.gangs_pending.set(request.app[SCHEDULER].gangs_pending())
    held, drained, ended_s = request.app[SCHEDULER].take_hold_metrics()
    m.holds.set(held)
    m.hold_drained.set(drained)
    for seconds in ended_s:
        m.hold_seconds.observe(seconds)
    _take_preemption_metrics(request.app)
    m.set_queues(request.app[SCHEDULER].describe_queues()["queues"])
    body, content_type = m.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


def _guarded(
    handler: Callable[[web.Request], Awaitable[web.Response]],
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A read-only view (/metrics, /debug) whose reader failed on some object answers 503 with why,
    logged once per call: never a bare 500, and the scheduling verbs are not its to stop."""

    async def guarded(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except Exception as exc:
            log.exception("%s failed", request.path)
            return web.Response(
                status=503,
                text=f"internal error reading {request.path}: {exc!r} (logged); the scheduling verbs "
                "are not affected\n",
            )

    return guarded


async def handle_debug_gangs(request: web.Request) -> web.Response:
    return _json(orjson.dumps({"gangs": request.app[SCHEDULER].describe_all()}))


async def handle_debug_queues(request: web.Request) -> web.Response:
    return _json(orjson.dumps(request.app[SCHEDULER].describe_queues()))


async def handle_debug_gang(request: web.Request) -> web.Response:
    key = GroupKey(f"{request.match_info['namespace']}/{request.match_info['name']}")
    found = request.app[SCHEDULER].describe(key)
    if found is None:
        return web.Response(status=404, text=f"no gang {key} is known to the extender\n")
    found["disruption"] = request.app[DISRUPTION].describe(key)
    return _json(orjson.dumps(found))


# ------------------------------------------------------------------ effects and ticker
def _track(app: web.Application, task: asyncio.Task[Any]) -> None:
    """Keep a fire-and-forget task referenced until it ends (the loop holds only weak references)."""
    app[READY].setdefault("tasks", set()).add(task)
    task.add_done_callback(app[READY]["tasks"].discard)


def _spawn_effects(app: web.Application, effects: list[Effect]) -> None:
    if effects:
        _track(app, asyncio.get_running_loop().create_task(_run_effects(app, effects)))


def _acting(app: web.Application) -> bool:
    """Whether this replica writes on its own now; logs and reports the moment that changes."""
    role, why = app[SCHEDULER].role(time.time())
    last = app[READY].get("role")
    if role is not last:
        app[READY]["role"] = role
        app[METRICS].leader.set(1 if role.acts else 0)
        # a transition is news (warning); the first word at start-up is not
        level = logging.WARNING if last is not None else logging.INFO
        log.log(level, "%s: %s", "acting on the cluster" if role.acts else "writing nothing", why)
    return role.acts


async def _run_effects(app: web.Application, effects: list[Effect]) -> None:
    source = app[SOURCE]
    store = app[STORE]
    for i, e in enumerate(effects):
        if not _acting(app):
            # the Lease moved while these waited: the new leader decides its own writes, and the
            # podgrouper looks again at the workloads whose writes are dropped
            podgrouper = app[PODGROUPER]
            for dropped in effects[i:]:
                if podgrouper is not None and dropped.kind.startswith("podgroup-"):
                    podgrouper.write_done(dropped, ok=False)  # type: ignore[attr-defined]
            app[SCHEDULER].dropped(effects[i:])  # an eviction never asked is not going
            return
        try:
            if e.kind == "nudge":
                # a value never written before: an unchanged annotation is no update, and no update
                # brings the pod back from kube-scheduler's queues
                value = f"{e.data['value']}@{time.time_ns()}"
                await source.nudge_pod(namespace=e.namespace, name=e.name, value=value)  # type: ignore[attr-defined]
            elif e.kind == "condition":
                key = pod_key(e.namespace, e.name)
                rec = store.pods.get(key)
                if (rec is not None and rec.node_name) or app[SCHEDULER].ledger.being_bound(key):
                    # bound meanwhile, or its binding in flight or confirmed before the watch shows
                    # it: the binding set PodScheduled=True, keep it
                    continue
                await source.set_pod_condition(namespace=e.namespace, name=e.name, condition=e.data)  # type: ignore[attr-defined]
            elif e.kind == "event":
                kind = e.data.get("kind", "Pod")
                uid = e.data.get("uid", "")
                if kind == "Pod":
                    rec = store.pods.get(pod_key(e.namespace, e.name))
                    uid = rec.uid if rec else ""
                await source.emit_event(  # type: ignore[attr-defined]
                    namespace=e.namespace,
                    name=e.name,
                    uid=uid,
                    kind=kind,
                    reason=e.data["reason"],
                    message=e.data["message"],
                    event_type=e.data.get("type", "Normal"),
                    api_version=e.data.get("apiVersion", ""),
                )
            elif e.kind == "group-status":
                await _write_group_status(app, e)
            elif e.kind.startswith("podgroup-"):
                await _write_podgroup(app, e)
            elif e.kind == "evict":
                await _evict(app, e)
        except Exception:
            log.exception("writing %s for %s/%s failed", e.kind, e.namespace, e.name)


async def _write_podgroup(app: web.Application, e: Effect) -> None:
    """One of the podgrouper's writes; one that did not land is planned again a little later."""
    source = app[SOURCE]
    target = {"group": e.data["group"], "kind": e.data["kind"]}
    ok = False
    try:
        if e.kind == "podgroup-create":
            ok = await source.create_object(**target, obj=e.data["object"])  # type: ignore[attr-defined]
        elif e.kind == "podgroup-patch":
            ok = await source.patch_object(  # type: ignore[attr-defined]
                **target, namespace=e.namespace, name=e.name, patch=e.data["patch"]
            )
        elif e.kind == "podgroup-delete":
            ok = await source.delete_object(  # type: ignore[attr-defined]
                **target, namespace=e.namespace, name=e.name, uid=e.data["uid"]
            )
    finally:
        podgrouper = app[PODGROUPER]
        if podgrouper is not None:
            podgrouper.write_done(e, ok=ok)  # type: ignore[attr-defined]


def _take_preemption_metrics(app: web.Application) -> None:
    """Count what the preemptors did since the last look (the scheduler keeps no metrics itself)."""
    outcomes, victims = app[SCHEDULER].take_preemption_counts()
    for outcome, n in outcomes.items():
        app[METRICS].preemptions.labels(outcome).inc(n)
    for kind, n in victims.items():
        app[METRICS].preemption_victims.labels(kind).inc(n)


_DECIDED_KEPT = 100_000  # groups whose last status decision is remembered (the least recent go first)
_STATUS_RETRY_S = 10.0  # a group status the API server did not answer is written again after this


async def _write_group_status(app: web.Application, e: Effect) -> None:
    """Write a group's status, newest last. Effects run as concurrent tasks, so two writes for one
    group (a tick's Pending, then the release's Running a few ms later) could land out of order and
    leave the older one standing: one writer per group writes, and takes over any status decided while
    its PATCH was in flight; and a status that reaches it after one decided later (its batch's earlier
    writes took longer) is dropped, so the group keeps the newest decision."""
    key = (e.data["group"], e.data["kind"], e.namespace, e.name)
    latest: dict[tuple[str, str, str, str], dict[str, Any]] = app[READY].setdefault("group_status", {})
    # a status decided before one already taken (its batch was slower to get here) is stale: dropped
    decided: OrderedDict[tuple[str, str, str, str], int] = app[READY].setdefault(
        "group_status_decided", OrderedDict()
    )
    order = int(e.data.get("decided", -1))
    if order < decided.get(key, -1):
        return
    decided[key] = order
    decided.move_to_end(key)
    while len(decided) > _DECIDED_KEPT:
        decided.popitem(last=False)
    retry: dict[tuple[str, str, str, str], tuple[float, Effect]] = app[READY].setdefault(
        "group_status_retry", {}
    )
    retry.pop(key, None)  # this decision is the newest: it replaces one waiting to be written again
    writing = key in latest
    latest[key] = e.data["status"]
    if writing:
        return  # the writer in flight writes this one next
    try:
        while True:
            status = latest[key]
            for cond in (*(status.get("conditions") or ()), *(status.get("schedulingConditions") or ())):
                cond.setdefault("lastTransitionTime", _now_rfc3339())
            written = await app[SOURCE].patch_group_status(  # type: ignore[attr-defined]
                group=key[0], kind=key[1], namespace=key[2], name=key[3], status=status
            )
            if latest[key] is status:
                if written is False:
                    # the API server did not answer: the status is decided once (a gang's Running
                    # at its release), so nothing else would write it; the ticker writes it again
                    # the newest decision taken (maybe not `e`'s, taken over while a PATCH was out)
                    data = {**e.data, "status": status, "decided": decided.get(key, order)}
                    retry[key] = (app[CLOCK]() + _STATUS_RETRY_S, dataclasses.replace(e, data=data))
                return
    finally:
        latest.pop(key, None)


def _retry_group_statuses(app: web.Application) -> None:
    """The group statuses whose write the API server did not answer, written again once due."""
    retry: dict[Any, tuple[float, Effect]] = app[READY].get("group_status_retry") or {}
    now = app[CLOCK]()
    due = [key for key, (at, _) in retry.items() if now >= at]
    if due:
        _spawn_effects(app, [retry.pop(key)[1] for key in due])


async def _evict(app: web.Application, e: Effect) -> None:
    """Say why on the pod (a DisruptionTarget condition and an Event), then evict it. The condition comes
    first: it is what a restarted service reads to know the eviction is under way. An eviction whose
    answer never came may have landed: the pod counts as going a while, and is asked again. Whatever
    else does not end in an accepted eviction (refused, failed before it was sent, the Lease moved)
    is told as refused: a preemption's victim is asked again later, and is not counted as going."""
    source = app[SOURCE]
    reason = str(e.data.get("reason", ""))
    uid = str(e.data.get("uid", ""))
    key = pod_key(e.namespace, e.name)
    condition = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": e.data.get("conditionReason") or PREEMPTED_BY_GANG,
        "message": reason,
    }
    accepted = unanswered = sent = False
    try:
        await source.set_pod_condition(namespace=e.namespace, name=e.name, condition=condition)  # type: ignore[attr-defined]
        if not _acting(app):
            return  # the Lease moved meanwhile: the new leader, reading the condition, finishes it
        await source.emit_event(  # type: ignore[attr-defined]
            namespace=e.namespace,
            name=e.name,
            uid=uid,
            kind="Pod",
            reason=str(condition["reason"]),
            message=reason,
            event_type="Warning",
        )
        if not _acting(app):
            return
        sent = True
        try:
            accepted = await source.evict_pod(namespace=e.namespace, name=e.name, uid=uid, reason=reason)  # type: ignore[attr-defined]
        except (EvictionUnanswered, TimeoutError, OSError) as exc:
            unanswered = True
            log.warning("evicting %s/%s: %s; counted as going a while, asked again", e.namespace, e.name, exc)
        except EvictionFailed:
            pass  # refused for good (403), or no Eviction API: passed over as a budget's 429 is (logged)
    finally:
        if accepted:
            app[METRICS].evicted_pods.inc()
            app[SCHEDULER].eviction_accepted(key, uid)
        elif unanswered:
            app[SCHEDULER].eviction_unanswered(key, uid)
        else:  # refused for now (a disruption budget), failed before it was sent, or not asked
            app[SCHEDULER].eviction_refused(key, uid, by_api=sent)


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _kick_ticker(app: web.Application) -> None:
    event: asyncio.Event = app[READY]["tick"]
    event.set()


def _answer_dropped(app: web.Application, answers: Iterable[Answer] | None = None) -> None:
    """Answer the waiting binds of plans the ledger dropped (a member or node gone, a replan)."""
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    for answer in app[SCHEDULER].ledger.take_answers() if answers is None else answers:
        for pk in answer.pods:
            barrier.resolve(pk, answer.message)


def _tick(app: web.Application) -> None:
    """One pass: carry out what the scheduler's tick decided (answer expired and dropped gangs'
    waiting binds, run the writes, evict broken gangs member by member, bind the barriers the
    watch completed), then answer the waiters the
    barrier itself finds overdue or whose start-up fence is over."""
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    scheduler = app[SCHEDULER]
    outcome = scheduler.tick(synced=app[SOURCE].is_synced(), acting=_acting(app))  # type: ignore[attr-defined]
    for expiry in outcome.expiries:
        if expiry.dropped:
            app[METRICS].gang_timeouts.inc()
        for pk in expiry.waiting:
            barrier.resolve(pk, expiry.message)
    _spawn_effects(app, outcome.effects)
    for eviction in outcome.evictions:
        if eviction.fresh:
            app[METRICS].gang_evictions.labels(eviction.why.value).inc()
        for evict in eviction.effects():  # each on its own: the whole gang goes at once
            _spawn_effects(app, [evict])
    _answer_dropped(app, outcome.answers)
    for gang, members in outcome.releases:
        _release(app, gang, members)
    _retry_group_statuses(app)
    now = app[CLOCK]()
    for pk in barrier.overdue(now):
        app[METRICS].waiter_deadlines.inc()
        barrier.resolve(pk, _overdue_message(app, pk))
    if barrier.fenced and scheduler.fence_left_s() <= 0:
        for pk in list(barrier.fenced):
            barrier.resolve(pk, _FENCE_OVER)


async def _expiry_ticker(app: web.Application) -> None:
    """Runs `_tick` until cancelled; sleeps until the next deadline or a kick, at most 0.1 s."""
    scheduler = app[SCHEDULER]
    barrier: Barrier = app[BARRIER]  # type: ignore[assignment]
    tick: asyncio.Event = app[READY]["tick"]
    while True:
        try:
            _tick(app)
        except Exception:
            # one bad gang must not stop the ticker: every other waiting bind would then hang
            log.exception("expiring gang barriers failed")
            for pk in barrier.overdue(float("inf")):
                barrier.resolve(
                    pk, f"{pk}: internal error in gang-extender's bind barrier; the scheduler will retry it"
                )
        fence = scheduler.fence_until if barrier.fenced else None
        deadlines = [
            d for d in (scheduler.ledger.next_deadline(), barrier.next_deadline(), fence) if d is not None
        ]
        tick.clear()
        if getattr(app[CLOCK], "moved_by_hand", False):
            # a test's clock moves only when the test moves it, and kicks the ticker then: waking on
            # real time besides would run a different number of ticks between two of its steps on a
            # busy machine than on an idle one, and a seed would not replay the same way
            await tick.wait()
            continue
        # capped: the clock may run faster than real time (the simulator's does)
        timeout = min(0.1, max(0.0, min(deadlines) - app[CLOCK]()) + 0.01) if deadlines else 0.1
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
    fence_s = app[SCHEDULER].fence_left_s()
    if fence_s > 0:
        log.info(
            "no binding for %.1fs after start-up (--bind-fence-s): any a previous instance left in "
            "flight lands first",
            fence_s,
        )

    def watch(what: str) -> Callable[[asyncio.Task[Any]], None]:
        def done(task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                return
            exc = task.exception()
            if isinstance(exc, SourceFatalError):
                app[READY]["fatal"] = str(exc)
                log.error("exiting: %s", exc)
                stop = app[READY].get("stop")
                if stop is not None:  # run() serves this app: end it (its cleanup answers waiting binds)
                    stop.set()
                return
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


def fatal_reason(app: web.Application) -> str | None:
    """Why the service stopped itself (its cluster source cannot go on as configured), if it did."""
    return app[READY].get("fatal")


def _leader_lease(settings: Settings) -> leadership.LeaderLease | None:
    c = settings.cluster
    return leadership.LeaderLease.parse(c.leader_lease, c.leader_identity) if c.leader_lease else None


def build_app(settings: Settings, *, source: ClusterSource, clock: Clock = time.monotonic) -> web.Application:
    """The service over `source`. `clock` is every deadline's; one with a true `moved_by_hand` (a
    test's, moved only when the test moves it and kicks the ticker) never wakes the ticker on real
    time."""
    app = web.Application(client_max_size=settings.server.max_body_bytes, middlewares=[_probe_only])
    app[PROBE_PORT] = 0
    store = ClusterStore()
    ledger = GangLedger(
        store,
        wait_s=settings.gang.wait_s,
        hold_s=settings.gang.hold_s,
        backoff_initial_s=settings.gang.backoff_initial_s,
        backoff_max_s=settings.gang.backoff_max_s,
        clock=clock,
        release_on_first_bind=settings.gang.release_on_first_bind,
        holds=HoldSettings(
            enabled=settings.gang.holds,
            depth=settings.gang.hold_depth,
            pools=settings.gang.pools,
            pool_label=settings.gang.pool_label,
            pool_reserve=settings.gang.pool_reserve,
        ),
    )
    app[SETTINGS] = settings
    app[STORE] = store
    app[SOURCE] = source
    app[CLOCK] = clock
    podgrouper = Podgrouper(store, clock=clock) if settings.cluster.podgrouper else None
    disruption = GangDisruption(store, ledger, stale_grace_s=settings.gang.stale_grace_s, clock=clock)
    scheduler = Scheduler(
        store,
        ledger,
        reason_nodes=settings.gang.reason_nodes,
        native_gang_scheduling=settings.gang.native_gang_scheduling,
        preemption_hold_s=settings.gang.preemption_hold_s,
        default_queue=settings.gang.default_queue,
        bind_fence_s=source.bind_fence_s,
        podgrouper=podgrouper,
        disruption=disruption,
        leader=_leader_lease(settings),
    )
    barrier = Barrier()
    app[SCHEDULER] = scheduler
    app[PASSTHROUGH] = Passthrough(scheduler)
    app[PODGROUPER] = podgrouper
    app[DISRUPTION] = disruption
    app[METRICS] = Metrics()
    app[METRICS].watch_source(source)
    app[BARRIER] = barrier
    app[READY] = {}
    app.cleanup_ctx.append(_lifecycle)
    app.on_shutdown.append(_answer_all_waiting)
    app.router.add_post("/filter", handle_filter)
    app.router.add_post("/prioritize", handle_prioritize)
    app.router.add_post("/bind", handle_bind)
    app.router.add_post("/preempt", handle_preempt)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    app.router.add_get("/metrics", _guarded(handle_metrics))
    app.router.add_get("/debug/gangs", _guarded(handle_debug_gangs))
    app.router.add_get("/debug/gangs/{namespace}/{name}", _guarded(handle_debug_gang))
    app.router.add_get("/debug/queues", _guarded(handle_debug_queues))
    attach = getattr(source, "attach", None)
    if attach is not None:
        # an embedded cluster is in the store before the first request, fed once, after every listener
        # is in place: each object reaches them as a live source's first list does
        attach(store)
    return app


@web.middleware
async def _probe_only(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    """The probe listener (--probe-host) serves health and metrics only: the verbs and /debug stay on
    the loopback address kube-scheduler uses, never on the pod IP."""
    probe = request.app[PROBE_PORT]
    if probe and request.path not in PROBE_PATHS:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        if sockname and sockname[1] == probe:
            return web.Response(
                status=404, text="only /healthz, /readyz and /metrics are served on the probe address\n"
            )
    return await handler(request)


class ListenError(Exception):
    """An address to serve on cannot be bound (in use, not local, no permission): one line."""


def _listen(host: str, port: int, flags: str) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port} ({flags}): {exc.strerror or exc}") from None
    return sock


def run(
    app: web.Application, server: ServerSettings, *, version: str, ssl_context: ssl.SSLContext | None = None
) -> None:
    """Serve `app` on --host:--port (over TLS with `ssl_context`), and on --probe-host:--probe-port when
    set (health and metrics only, plain HTTP), until SIGTERM or SIGINT; aiohttp's shutdown then answers
    every waiting bind."""
    socks = [_listen(server.host, server.port, "--host/--port")]
    where = f"{'https' if ssl_context else 'http'}://{server.host}:{socks[0].getsockname()[1]}"
    if server.probe_host:
        try:
            socks.append(_listen(server.probe_host, server.probe_port, "--probe-host/--probe-port"))
        except ListenError:
            socks[0].close()
            raise
        app[PROBE_PORT] = socks[1].getsockname()[1]
        where += f" (health and metrics also on http://{server.probe_host}:{app[PROBE_PORT]})"
    log.info("gang-extender %s serving on %s", version, where)
    if not (ssl_context and ssl_context.verify_mode == ssl.CERT_REQUIRED) and not _loopback(server.host):
        log.warning(
            "anyone who reaches %s can call the verbs, bind included: set --tls-cert-file, --tls-key-file "
            "and --tls-client-ca-file, or serve on loopback beside kube-scheduler",
            where,
        )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(app, [(socks[0], ssl_context), *((s, None) for s in socks[1:])]))


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def _serve(app: web.Application, listeners: list[tuple[socket.socket, ssl.SSLContext | None]]) -> None:
    """web.run_app's serving loop with a TLS setting per socket (run_app gives every socket the same one,
    and the probe socket must stay plain HTTP for the kubelet). SIGTERM and SIGINT end the wait, so the
    runner's cleanup answers every waiting bind while their handlers are still alive to send it."""
    stop = asyncio.Event()
    app[READY]["stop"] = stop  # a fatal cluster-source error ends the service too
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=75.0)  # run_app's keep-alive
    await runner.setup()
    try:
        for sock, ssl_context in listeners:
            await web.SockSite(runner, sock, ssl_context=ssl_context).start()
        await stop.wait()
    finally:
        await runner.cleanup()
