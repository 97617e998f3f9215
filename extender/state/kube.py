"""The live cluster: list+watch into the store, and the few writes the service makes (bind, status, events).

The only module that imports kubernetes_asyncio. It uses the client for configuration, auth and its
HTTP session only: every object is read as raw JSON with orjson (the client's model classes cost
~68x per object) and every write is a plain request whose status code we judge ourselves.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import gc
import importlib
import importlib.machinery
import importlib.util
import logging
import math
import os
import random
import ssl
import sys
import time
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from extender.grouping import WORKLOAD_KINDS
from extender.model import labels
from extender.model.keys import api_group, object_key
from extender.state import heap, nesting
from extender.state.projection import page_decoder, project
from extender.state.source import (
    BindError,
    EvictionFailed,
    EvictionUnanswered,
    SkippedObjects,
    SourceFatalError,
    one_line,
)

if TYPE_CHECKING:
    from types import ModuleType

    from kubernetes_asyncio.client.configuration import Configuration

    from extender.state.store import ClusterStore

log = logging.getLogger(__name__)

_JSON = "application/json"
_MERGE_PATCH = "application/merge-patch+json"
_STRATEGIC_PATCH = "application/strategic-merge-patch+json"


_PACKAGES = ("kubernetes_asyncio", "kubernetes_asyncio.client")
_MODELS = "kubernetes_asyncio.client.models"


def _import_kube_config() -> tuple[type[Configuration], ModuleType]:
    """kubernetes_asyncio's Configuration and its `config` package (kubeconfig and in-cluster loading),
    without the API classes and models it never uses here.

    The `kubernetes_asyncio` and `kubernetes_asyncio.client` packages import every API class and
    model on import (34 MiB resident, a sixth of an idle service), and `config` imports `client`. The
    loader needs only `client.configuration` and `client.api_client`, which reads `client.models` only
    to deserialize responses, never asked of it here. So both packages are entered without running
    their `__init__` (run after all, should anything ask them for a name they lack), and `client.models`
    stands in for the real package until anything reads it. When kubernetes_asyncio is already
    imported, or its layout differs, the plain import is used.
    """
    if "kubernetes_asyncio" not in sys.modules:
        try:
            for name in _PACKAGES:
                spec = importlib.util.find_spec(name)
                if spec is None or spec.loader is None:
                    raise ImportError(name)
                package = importlib.util.module_from_spec(spec)
                package.__getattr__ = _completion(package, spec)  # type: ignore[method-assign]
                sys.modules[name] = package
            top, client = sys.modules["kubernetes_asyncio"], sys.modules["kubernetes_asyncio.client"]
            top.client = client  # type: ignore[attr-defined]
            models = types.ModuleType(_MODELS, "kubernetes_asyncio.client.models, imported on first use")
            models.__getattr__ = _real_models  # type: ignore[method-assign]
            sys.modules[_MODELS] = models
            client.models = models  # type: ignore[attr-defined]
            configuration = importlib.import_module("kubernetes_asyncio.client.configuration")
            api_client = importlib.import_module("kubernetes_asyncio.client.api_client")
            client.Configuration = configuration.Configuration  # type: ignore[attr-defined]
            client.ApiClient = api_client.ApiClient  # type: ignore[attr-defined]
            return configuration.Configuration, importlib.import_module("kubernetes_asyncio.config")
        except Exception:  # a layout this was not written for: import it whole
            log.debug("importing kubernetes_asyncio whole", exc_info=True)
            for name in [n for n in sys.modules if n.partition(".")[0] == "kubernetes_asyncio"]:
                del sys.modules[name]  # none was imported before: all are this attempt's
    from kubernetes_asyncio import client, config

    return client.Configuration, config


def _real_models(name: str) -> Any:
    """The stand-in's attributes: the real `client.models`, imported now, replaces it."""
    real = sys.modules.get(_MODELS)
    if real is None or isinstance(getattr(real, "__dict__", {}).get("__getattr__"), types.FunctionType):
        sys.modules.pop(_MODELS, None)
        real = importlib.import_module(_MODELS)
        sys.modules["kubernetes_asyncio.client"].models = real  # type: ignore[attr-defined]
    return getattr(real, name)


def _completion(package: ModuleType, spec: importlib.machinery.ModuleSpec) -> Callable[[str], Any]:
    """A package's `__getattr__` that runs its own `__init__` on the first name it lacks (a submodule
    is left to the import system, which asks for it before importing it)."""

    def complete(name: str) -> Any:
        if name.startswith("__") or "__getattr__" not in package.__dict__:
            raise AttributeError(name)
        if importlib.util.find_spec(f"{package.__name__}.{name}") is not None:
            raise AttributeError(name)
        del package.__dict__["__getattr__"]
        _real_models("__name__")  # the package's __init__ imports model modules from it
        assert spec.loader is not None
        spec.loader.exec_module(package)
        return getattr(package, name)

    return complete


_Configuration, k8s_config = _import_kube_config()


@dataclasses.dataclass(frozen=True)
class KubeSettings:
    watch_timeout_s: int = 300
    """Server-side timeout of one watch request; the watch then resumes from the last resourceVersion."""
    list_page_size: int = 500
    request_timeout_s: float = 10.0
    """Bound on every list page and write."""
    backoff_initial_s: float = 0.5
    """First reconnect delay after a failed list or watch; doubles per failure, with jitter."""
    backoff_max_s: float = 30.0
    write_attempts: int = 4
    """Tries for a write that failed with 5xx, 429 or a connection error (all safe to repeat)."""
    write_backoff_s: float = 0.1
    write_backoff_max_s: float = 1.0
    """Cap on the delay between tries of a write that keeps trying for its caller's budget."""
    event_interval_s: float = 30.0
    """At most one Event per object and reason in this window; a gang's life emits few, repeats are noise."""
    component: str = "gang-extender"
    """Event source, shown by `kubectl describe`: not kube-scheduler's (gang-scheduler), so an operator
    tells the extender's events from the scheduler's."""
    user_agent: str = "gang-extender"
    """Sent with every request: the audit log tells the replicas apart by it (the CLI adds the version
    and the replica's --leader-identity)."""
    rediscovery_s: float = 30.0
    """While a watched kind is not served (its CRD not installed), API discovery is asked again this
    often, and a kind found served since is listed and watched from then on (as the garbage
    collector's monitors are): installing KAI's or JobSet's CRDs after this service needs no restart."""
    status_field_recheck_s: float = 600.0
    """A status field the API server pruned from a write of ours (its CRD does not define it) is left out
    of writes for this long, then tried once more: a CRD changed back to defining it is written again."""


@dataclasses.dataclass(frozen=True)
class WatchedKind:
    """One kind this source lists and watches; `versions` in order of preference."""

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool = True
    namespace: str | None = None  # one namespace's objects only (None: every namespace's)
    field_selector: str = ""  # e.g. metadata.name=X: one object, which RBAC can grant by resourceNames


def lease_kind(namespace: str, name: str) -> WatchedKind:
    """The one Lease of this replica's kube-scheduler (its leader election): watched alone, so the
    service needs no more than get, list and watch on that Lease by name."""
    return WatchedKind(
        "coordination.k8s.io",
        ("v1",),
        "leases",
        "Lease",
        namespace=namespace,
        field_selector=f"metadata.name={name}",
    )


DEFAULT_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("", ("v1",), "nodes", "Node", namespaced=False),
    WatchedKind("", ("v1",), "pods", "Pod"),
    WatchedKind("batch", ("v1",), "jobs", "Job"),
    WatchedKind("jobset.x-k8s.io", ("v1alpha2",), "jobsets", "JobSet"),
    WatchedKind("kubeflow.org", ("v1",), "pytorchjobs", "PyTorchJob"),
    WatchedKind("scheduling.run.ai", ("v2alpha2",), "podgroups", "PodGroup"),
    # scheduling.k8s.io serves PodGroup only in releases with workload-aware scheduling; any of these
    # versions that the server lists is taken, newest first.
    WatchedKind(
        "scheduling.k8s.io", ("v1", "v1beta1", "v1alpha3", "v1alpha2", "v1alpha1"), "podgroups", "PodGroup"
    ),
    # a v1alpha2 PodGroup may take its policy from its Workload's template
    WatchedKind(
        "scheduling.k8s.io", ("v1", "v1beta1", "v1alpha3", "v1alpha2", "v1alpha1"), "workloads", "Workload"
    ),
    # a 1.37 tree of PodGroups under CompositePodGroups (alpha: v1alpha3 only, gate CompositePodGroup)
    WatchedKind("scheduling.k8s.io", ("v1alpha3",), "compositepodgroups", "CompositePodGroup"),
    WatchedKind("kai.scheduler", ("v1alpha1",), "topologies", "Topology", namespaced=False),
    WatchedKind("scheduling.run.ai", ("v2",), "queues", "Queue", namespaced=False),
)


# What an operator gets without a kind's API, and what serves it (README "Requirements").
_UNSERVED_MEANS = {
    "jobset.x-k8s.io": "JobSets are not grouped as gangs (install JobSet's CRDs, v1alpha2)",
    "kubeflow.org": "PyTorchJobs are not grouped as gangs (install the Kubeflow training operator's CRDs)",
    "scheduling.run.ai": "pods naming a KAI PodGroup wait, and no PodGroups are kept for derived gangs "
    "(install KAI Scheduler's PodGroup CRD, v2alpha2)",
    "kai.scheduler": "gangs naming a KAI Topology wait for it (install KAI's Topology CRD, v1alpha1)",
    "scheduling.k8s.io": "the Workload API is off (Kubernetes 1.35+ with the GenericWorkload feature gate)",
}
_UNSERVED_KIND_MEANS = {
    ("scheduling.run.ai", "queues"): "queues are not enforced (install KAI Scheduler's Queue CRD, v2)",
    ("scheduling.k8s.io", "compositepodgroups"): "pods of a PodGroup that names a parent CompositePodGroup "
    "wait for it (Kubernetes 1.37+ with the CompositePodGroup feature gate and scheduling.k8s.io/v1alpha3)",
}


@dataclasses.dataclass(frozen=True)
class ServedKind:
    """A watched kind at the version the server offers."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    namespace: str | None = None
    field_selector: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def collection_path(self) -> str:
        """Where this source lists and watches the kind (one namespace's, when it watches one)."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespace is not None:
            return f"{prefix}/namespaces/{self.namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"

    def selecting(self, query: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [*query, ("fieldSelector", self.field_selector)] if self.field_selector else query

    def object_path(self, *, namespace: str | None, name: str) -> str:
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced:
            return f"{prefix}/namespaces/{namespace}/{self.plural}/{name}"
        return f"{prefix}/{self.plural}/{name}"


class ApiStatusError(Exception):
    """A non-2xx answer from the API server: its status code and the server's own message."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.reason = reason


_YIELD_EVERY_S = 0.002  # longest stretch of watch events applied without yielding the event loop


@dataclasses.dataclass
class _Connection:
    """One aiohttp session to the API server, configured from a kubeconfig or the pod's service account.

    kubernetes-asyncio loads the configuration and refreshes tokens; requests go straight through
    aiohttp. Its own client costs about 5x the CPU of a raw POST (performance-floor.md) and, with
    trust_env, reads proxy variables and ~/.netrc in a thread on every request: measured on the
    bind path under a real kube-scheduler, that was most of the service's CPU per pod.
    """

    cfg: Any  # kubernetes_asyncio Configuration
    session: aiohttp.ClientSession
    host: str
    user_agent: str  # KubeSettings.user_agent

    @classmethod
    def open(cls, cfg: Any, user_agent: str) -> _Connection:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
        if not cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=64),
            trust_env=False,
            # a watch event carries a whole object; etcd's default request limit is 1.5 MiB
            read_bufsize=2**21,
        )
        return cls(cfg=cfg, session=session, host=str(cfg.host).rstrip("/"), user_agent=user_agent)

    async def headers(self, content_type: str) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": _JSON, "User-Agent": self.user_agent}
        token = await self.cfg.get_api_key_with_prefix("BearerToken")  # refreshes rotated tokens
        if token:
            headers["Authorization"] = token
        elif self.cfg.username:
            headers["Authorization"] = self.cfg.get_basic_auth_token()
        return headers


@dataclasses.dataclass
class _Cursor:
    """Where one kind's watch stands: the resourceVersion of the last event applied."""

    rv: str | None


_paused_lists = 0  # lists under way with the cyclic collector paused (nodes and pods list at once)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic collector off while lists are under way (decoded, projected, applied page by
    page), back on when the last one ends. A list allocates hundreds of thousands of objects;
    each collection they set off would walk the whole cache (every pod kept so far), and resumed
    between pages the initial sync of 150,000 pods spent about 10% of its CPU there. Refcounting
    frees a page's objects with the page; concurrent lists share one pause."""
    global _paused_lists
    if _paused_lists == 0 and not gc.isenabled():  # someone else paused it: leave it to them
        yield
        return
    _paused_lists += 1
    gc.disable()
    try:
        yield
    finally:
        _paused_lists -= 1
        if _paused_lists == 0:
            gc.enable()


class _Gone(Exception):
    """The watched resourceVersion is too old (410): relist."""


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


def _status_message(status: int, body: bytes) -> ApiStatusError:
    try:
        doc = orjson.loads(body)
        return ApiStatusError(status, str(doc.get("message", "")), str(doc.get("reason", "")))
    except (orjson.JSONDecodeError, AttributeError):
        return ApiStatusError(status, body[:200].decode("utf-8", "replace"))


def _kind_label(served: ServedKind) -> str:
    """A kind for a metric label, with its group when it has one: "Pod", "PodGroup.scheduling.run.ai"."""
    return f"{served.kind}.{served.group}" if served.group else served.kind


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _refused_credentials(exc: ApiStatusError) -> str:
    who = "unauthorized (HTTP 401)" if exc.status == 401 else "forbidden (HTTP 403)"
    return (
        f"the API server answered API discovery {who}: {exc.message or exc.reason}; check the token or "
        "client certificate of --kubeconfig, or the pod's service account token (--in-cluster)"
    )


class SourceConfigError(Exception):
    """The API server's client configuration cannot be loaded: a fatal start-up error (one line)."""


def load_client_config(kubeconfig: str | None) -> Configuration:
    """The client configuration from a kubeconfig file, or in-cluster when `kubeconfig` is None.

    Called once at start-up, before serving: a configuration that cannot load never gets better by
    retrying, and a process left running with it would only ever answer /readyz 503."""
    cfg = _Configuration()
    if kubeconfig and not os.path.isfile(kubeconfig):
        raise SourceConfigError(f"cannot load kubeconfig {kubeconfig!r}: no such file")
    if kubeconfig and not os.access(kubeconfig, os.R_OK):
        raise SourceConfigError(f"cannot load kubeconfig {kubeconfig!r}: not readable by this process")
    try:
        if kubeconfig:
            asyncio.run(k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg))
        else:
            k8s_config.load_incluster_config(client_configuration=cfg)
    except Exception as exc:  # any failure to configure is fatal, whatever the library raised
        where = (
            f"kubeconfig {kubeconfig!r}"
            if kubeconfig
            else "the in-cluster configuration (is this process running in a pod with a service account?)"
        )
        raise SourceConfigError(f"cannot load {where}: {one_line(str(exc) or type(exc).__name__)}") from None
    return cfg


class KubeClusterSource:
    """A ClusterSource over a live API server (kubeconfig file, or in-cluster when `kubeconfig` is None)."""

    def __init__(
        self,
        kubeconfig: str | None,
        *,
        settings: Any = None,
        kinds: tuple[WatchedKind, ...] = DEFAULT_KINDS,
        clock: Callable[[], float] = time.monotonic,
        client_config: Configuration | None = None,
        bind_fence_s: float = 5.0,
        _iterations: int | None = None,
    ) -> None:
        self._kubeconfig = kubeconfig
        # Every binding POST asks the API server to give it up after this (`?timeout=`), so one that a
        # killed process left in flight lands within it or never; a new process waits it out first.
        self.bind_fence_s = bind_fence_s
        self._client_config = client_config  # loaded at start-up (load_client_config); else on first use
        kube = getattr(settings, "kube", None)
        self._settings: KubeSettings = (
            kube
            if isinstance(kube, KubeSettings)
            else (settings if isinstance(settings, KubeSettings) else KubeSettings())
        )
        self._kinds = kinds
        self._clock = clock
        # Test hook: each kind's loop ends after this many watch requests (None: until cancelled).
        self._iterations = _iterations
        self._api: _Connection | None = None
        self._api_lock = asyncio.Lock()
        self._served: dict[tuple[str, str], ServedKind] = {}
        self._unserved_owners: frozenset[tuple[str, str]] = frozenset()
        """Watched workload kinds not served: an object owned by one says its CRD is installed now."""
        self._look_again = asyncio.Event()
        self._eviction_version: str | None = None  # "v1", or "v1beta1" where v1 is not served (1.20)
        self._pending_sync: set[tuple[str, str]] | None = None
        self._synced = False
        self._last_event_s: dict[tuple[str, str], float] = {}
        self.skipped = SkippedObjects()
        self.write_errors: collections.Counter[tuple[str, str]] = collections.Counter()
        """(write, status class) -> writes that failed after their retries; status class "4xx",
        "5xx" or "connection" (no answer). Read by the server's /metrics."""
        self.watch_restarts: collections.Counter[str] = collections.Counter()
        """kind ("Pod", "PodGroup.scheduling.run.ai") -> relists and re-watches after an error or 410."""
        self._status_dropped: dict[tuple[str, str], dict[str, float]] = {}
        """(group, kind) -> top-level status field the API server pruned from a status PATCH of ours (the
        served CRD does not define it: KAI v0.16 removed `phase`, `running` and `pending`) -> when that
        was seen. Learned from the answers (a restart learns it again); see status_field_recheck_s."""

    # ---- connection --------------------------------------------------------------------------

    async def _client(self) -> _Connection:
        async with self._api_lock:
            if self._api is None:
                cfg = self._client_config
                if cfg is None:
                    cfg = _Configuration()
                    if self._kubeconfig:
                        await k8s_config.load_kube_config(
                            config_file=self._kubeconfig, client_configuration=cfg
                        )
                    else:
                        k8s_config.load_incluster_config(client_configuration=cfg)
                self._api = _Connection.open(cfg, self._settings.user_agent)
            return self._api

    async def close(self) -> None:
        if self._api is not None:
            await self._api.session.close()
            self._api = None

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = _JSON,
        timeout: Any = None,
    ) -> aiohttp.ClientResponse:
        """One raw request; the caller reads and releases the response. Non-2xx answers are returned."""
        conn = await self._client()
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=self._settings.request_timeout_s)
        elif not isinstance(timeout, aiohttp.ClientTimeout):
            timeout = aiohttp.ClientTimeout(total=float(timeout))
        data = body if body is None or isinstance(body, bytes) else orjson.dumps(body)
        return await conn.session.request(
            method,
            conn.host + path,
            params=query or None,
            data=data,
            headers=await conn.headers(content_type),
            timeout=timeout,
            proxy=conn.cfg.proxy or None,
        )

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = _JSON,
    ) -> tuple[int, bytes]:
        resp = await self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            return resp.status, await resp.read()
        finally:
            resp.release()

    async def _write(
        self,
        method: str,
        path: str,
        *,
        body: Any,
        content_type: str = _JSON,
        what: str,
        write: str = "other",
        expected: tuple[int, ...] = (),
        query: list[tuple[str, str]] | None = None,
        persist_s: float = 0.0,
    ) -> tuple[int, bytes]:
        """A write retried on 5xx, 429 and connection errors; other answers are returned to the caller.

        It is tried `write_attempts` times, and beyond that for as long as `persist_s` lasts: a caller
        with time to wait (a gang's release) is better served by the API server coming back than by
        an error, and a POST whose connection was cut may have landed, which only a later answer can
        say. An API server just back from being unreachable answers 403 until its authorizer has
        synced; that 403 is retried too while `persist_s` lasts, any other is final.

        A final answer that is not 2xx counts in `write_errors` under `write`, unless it is one of
        `expected` (the caller judges those, and counts them if they turn out to be errors)."""
        s = self._settings
        status, data = 0, b""
        give_up_at = time.monotonic() + persist_s
        unreachable = False
        tries = 0
        while True:
            try:
                status, data = await self._request(
                    method, path, query=query, body=body, content_type=content_type
                )
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                status, data = 0, str(exc).encode()
            tries += 1
            unreachable = unreachable or not status
            warming_up = status == 403 and unreachable and persist_s > 0
            if status and not _retryable(status) and not warming_up:
                if not 200 <= status < 300 and status not in expected:
                    self._count_write_error(write, status)
                return status, data
            delay = min(s.write_backoff_max_s, s.write_backoff_s * 2 ** (tries - 1)) * (0.5 + random.random())
            if tries >= s.write_attempts and time.monotonic() + delay >= give_up_at:
                break
            await asyncio.sleep(delay)
        self._count_write_error(write, status)
        log.warning("%s failed after %d tries: %s", what, tries, _status_message(status, data))
        return status, data

    def _count_write_error(self, write: str, status: int) -> None:
        self.write_errors[(write, f"{status // 100}xx" if status else "connection")] += 1

    # ---- discovery ---------------------------------------------------------------------------

    async def _discover(
        self, kinds: tuple[WatchedKind, ...] | None = None, *, quiet: bool = False
    ) -> dict[tuple[str, str], ServedKind]:
        """Which of `kinds` (default: every watched kind) the server offers, at which version; one log
        line per kind skipped, unless `quiet`."""
        status, data = await self._request("GET", "/apis")
        if status != 200:
            raise _status_message(status, data)
        offered: dict[str, list[str]] = {"": ["v1"]}
        for grp in orjson.loads(data).get("groups") or []:
            offered[grp.get("name", "")] = [v.get("version", "") for v in grp.get("versions") or []]
        resources: dict[str, set[str]] = {}
        served: dict[tuple[str, str], ServedKind] = {}
        for wk in self._kinds if kinds is None else kinds:
            chosen = None
            for version in wk.versions:
                if version not in offered.get(wk.group, ()):
                    continue
                gv = f"{wk.group}/{version}" if wk.group else version
                if gv not in resources:
                    resources[gv] = await self._resources(gv)
                if wk.plural in resources[gv]:
                    chosen = version
                    break
            if chosen is None:
                if quiet:
                    continue
                log.info(
                    "API server does not serve %s.%s (%s); not watching it until it does "
                    "(asked every %.0f s): %s",
                    wk.plural,
                    wk.group or "core",
                    ", ".join(wk.versions),
                    self._settings.rediscovery_s,
                    _UNSERVED_KIND_MEANS.get((wk.group, wk.plural))
                    or _UNSERVED_MEANS.get(wk.group, "its objects are not read"),
                )
                continue
            served[(wk.group, wk.kind)] = ServedKind(
                wk.group, chosen, wk.plural, wk.kind, wk.namespaced, wk.namespace, wk.field_selector
            )
        return served

    async def _resources(self, group_version: str) -> set[str]:
        path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        status, data = await self._request("GET", path)
        if status == 404:
            return set()
        if status != 200:
            raise _status_message(status, data)
        return {r.get("name", "") for r in orjson.loads(data).get("resources") or []}

    def served_kinds(self) -> list[ServedKind]:
        return list(self._served.values())

    # ---- list + watch ------------------------------------------------------------------------

    def is_synced(self) -> bool:
        return self._synced

    async def run(self, store: ClusterStore) -> None:
        """Discover, list every served kind into `store`, mark synced, then watch until cancelled."""
        s = self._settings
        delay = s.backoff_initial_s
        while True:
            try:
                self._served = await self._discover()
                break
            except ApiStatusError as exc:
                if exc.status in (401, 403):  # retrying cannot help: a configuration error
                    await self.close()
                    raise SourceFatalError(_refused_credentials(exc)) from exc
                log.warning("API discovery failed (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, s.backoff_max_s)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                log.warning("API discovery failed (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, s.backoff_max_s)
        # what the cache holds every object of: a pod's owner of a kind it does not list (a CRD not
        # installed) is no sign that the owner is gone or still coming
        store.listed = frozenset(self._served)
        self._unserved_owners = self._unserved_workloads()
        self._pending_sync = set(self._served)
        if not self._pending_sync:
            self._synced = True
        try:
            async with asyncio.TaskGroup() as tasks:
                for served in self._served.values():
                    tasks.create_task(self._feed(store, served), name=f"watch {served.plural}.{served.group}")
                if self._iterations is None:  # the test hook bounds the feeds' lives, not this one's
                    tasks.create_task(self._rediscover(store, tasks), name="API discovery")
        finally:
            await self.close()

    async def _rediscover(self, store: ClusterStore, tasks: asyncio.TaskGroup) -> None:
        """Ask discovery again for the watched kinds not served yet, every `rediscovery_s`, or at once
        (at most once a second) when an object arrives owned by one of them; list and watch each one
        found."""
        loop = asyncio.get_running_loop()
        asked_s = loop.time()
        while True:
            unserved = tuple(wk for wk in self._kinds if (wk.group, wk.kind) not in self._served)
            self._unserved_owners = self._unserved_workloads()
            if not unserved:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._look_again.wait(), self._settings.rediscovery_s)
            await asyncio.sleep(max(0.0, asked_s + min(1.0, self._settings.rediscovery_s) - loop.time()))
            self._look_again.clear()
            asked_s = loop.time()
            try:
                found = await self._discover(unserved, quiet=True)
            except Exception as exc:  # whatever it was, the watches this runs beside go on
                log.warning(
                    "API discovery failed (%s); asking again in %.0f s", exc, self._settings.rediscovery_s
                )
                continue
            for key, served in sorted(found.items()):
                log.info(
                    "API server now serves %s.%s (%s): listing and watching it",
                    served.plural,
                    served.group or "core",
                    served.version,
                )
                self._served[key] = served
                tasks.create_task(self._feed(store, served), name=f"watch {served.plural}.{served.group}")

    def _unserved_workloads(self) -> frozenset[tuple[str, str]]:
        """The watched workload kinds the server does not serve (yet)."""
        return WORKLOAD_KINDS & frozenset(
            (wk.group, wk.kind) for wk in self._kinds if (wk.group, wk.kind) not in self._served
        )

    def _mark_listed(self, store: ClusterStore, served: ServedKind) -> None:
        key = (served.group, served.kind)
        if store.listed is not None and key not in store.listed:
            # a kind found after start-up: only now does the store hold every object of it
            store.now_lists(key)
        if self._pending_sync is None:
            return
        self._pending_sync.discard((served.group, served.kind))
        if not self._pending_sync and not self._synced:
            self._synced = True
            heap.settle()  # the list's leftovers collected, the cache frozen, free pages given back
            log.info("initial list complete: %s", ", ".join(sorted(k.plural for k in self._served.values())))

    async def _feed(self, store: ClusterStore, served: ServedKind, rv: str | None = None) -> None:
        """List (when `rv` is None) then watch one kind, forever or for `_iterations` watch requests."""
        s = self._settings
        delay = s.backoff_initial_s
        watches = 0
        cursor = _Cursor(rv)
        while self._iterations is None or watches < self._iterations:
            rv = cursor.rv
            try:
                if rv is None:
                    cursor.rv = rv = await self._list_into(store, served)
                    self._mark_listed(store, served)
                watches += 1
                await self._watch_into(store, served, cursor)
                delay = s.backoff_initial_s
            except _Gone:
                log.info(
                    "watch of %s.%s expired (410 Gone); relisting", served.plural, served.group or "core"
                )
                cursor.rv = None
                self.watch_restarts[_kind_label(served)] += 1
            except (TimeoutError, aiohttp.ClientError, OSError, ApiStatusError, ValueError) as exc:
                self.watch_restarts[_kind_label(served)] += 1
                log.warning(
                    "%s %s.%s failed (%s); retrying in %.1f s",
                    "list" if rv is None else "watch",
                    served.plural,
                    served.group or "core",
                    exc,
                    delay,
                )
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, s.backoff_max_s)

    async def _list_into(self, store: ClusterStore, served: ServedKind) -> str:
        """List every page into `store`, then remove what the list no longer has; returns the list's
        resourceVersion. Each page is applied as it arrives: 150,000 pods held until the last page
        would all be alive at once as mappings, where the store keeps them compact; a relist thus
        shows the store each page's objects before the next page's, as a watch would. (Asking for
        the next page before applying this one, with the loop yielding while it applies, cost about
        2.5 s more CPU at 150,000 pods than it saved in wall time on one machine.)"""
        fresh: set[str] = set()
        cont = ""
        decode = page_decoder(served.kind) if not served.group else None
        with _collector_paused():
            while True:
                status, data = await self._list_page(served, cont)
                if status == 410:
                    # The continue token expired mid-list: start over (what was applied stays).
                    fresh, cont = set(), ""
                    continue
                if status != 200:
                    raise _status_message(status, data)
                doc = decode(data) if decode is not None else None
                if doc is None:
                    doc = nesting.loads_page(data)
                del data
                items = doc.get("items") or []
                meta = doc.get("metadata") or {}
                del doc
                for item in items:
                    if isinstance(item, nesting.Unreadable):
                        # the store keeps the last version it read of it, as of any object it skips
                        fresh.add(object_key(item.ref))
                        self._skip(item.ref, item.error, served)
                        continue
                    if not isinstance(item, dict):
                        self._skip(item, ValueError("a listed item that is not a mapping"), served)
                        continue
                    item["apiVersion"] = served.api_version
                    item["kind"] = served.kind
                    obj = project(item)  # the page's whole objects go with the page
                    fresh.add(object_key(obj))
                    self._apply(store.upsert, obj, served)
                del items
                cont = meta.get("continue") or ""
                if not cont:
                    self._remove_unlisted(store, served, fresh)
                    return str(meta.get("resourceVersion", ""))

    async def _list_page(self, served: ServedKind, cont: str) -> tuple[int, bytes]:
        query = [("limit", str(self._settings.list_page_size))]
        if cont:
            query.append(("continue", cont))
        return await self._request("GET", served.collection_path, query=served.selecting(query))

    def _apply(self, op: Callable[[dict[str, Any]], None], obj: dict[str, Any], served: ServedKind) -> bool:
        return self.skipped.apply(op, obj, served.kind)

    def _skip(self, obj: Any, exc: BaseException, served: ServedKind) -> None:
        self.skipped.skip(obj, exc, served.kind)

    @property
    def bad_objects(self) -> int:
        """Listed or watched objects the store could not apply (each skipped and logged once)."""
        return self.skipped.count

    @property
    def last_bad_object(self) -> str:
        return self.skipped.last

    def _unreadable(self, kind: Any, obj: nesting.Unreadable, served: ServedKind, store: ClusterStore) -> str:
        """A watched object that cannot be decoded. Its deletion is applied by its name (skipped when
        even that cannot be read); a new version is skipped and the store keeps the last it read.
        Returns the event's resourceVersion ("" when unread), for the watch's cursor."""
        ref = dict(obj.ref, apiVersion=served.api_version, kind=served.kind)
        if kind == "DELETED" and ref["metadata"].get("name"):
            self._apply(store.remove, ref, served)
        elif kind in ("ADDED", "MODIFIED", "DELETED"):
            self._skip(ref, obj.error, served)
        return str(ref["metadata"].get("resourceVersion") or "")

    def _remove_unlisted(self, store: ClusterStore, served: ServedKind, fresh: set[str]) -> None:
        """The end of a (re)list: what the store holds of this kind and the list did not have is gone.
        One object the store cannot remove is skipped and never costs the cache the rest."""
        for old in store.unlisted(served.group, served.kind, fresh):
            self._apply(store.remove, old, served)

    async def _watch_into(self, store: ClusterStore, served: ServedKind, cursor: _Cursor) -> str:
        """One watch request from `cursor.rv`, advancing it with every event applied (so a watch
        that breaks mid-stream resumes after the last event, not replaying the ones applied).
        Returns the last resourceVersion seen. Raises _Gone on 410."""
        rv = cursor.rv or ""
        s = self._settings
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(s.watch_timeout_s)),
            ("resourceVersion", rv),
        ]
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=s.request_timeout_s, sock_read=s.watch_timeout_s + 30
        )
        resp = await self._send("GET", served.collection_path, query=served.selecting(query), timeout=timeout)
        try:
            if resp.status == 410:
                raise _Gone()
            if resp.status != 200:
                raise _status_message(resp.status, await resp.read())
            slice_start = time.monotonic()
            async for line in resp.content:
                if time.monotonic() - slice_start > _YIELD_EVERY_S:
                    # a burst of events (a Job creating its pods) must not hold up filter and bind
                    # answers for its whole length: let them in between
                    await asyncio.sleep(0)
                    slice_start = time.monotonic()
                if not line.strip():
                    continue
                event = nesting.loads_event(line)
                if not isinstance(event, dict):
                    raise ValueError(f"malformed watch event: {line[:100]!r}")
                kind = event.get("type")
                obj = event.get("object") or {}
                if isinstance(obj, nesting.Unreadable):
                    if kind == "ERROR":
                        raise ValueError(f"malformed watch event: {line[:100]!r}")
                    new_rv = self._unreadable(kind, obj, served, store)
                    if new_rv:
                        cursor.rv = rv = new_rv
                    continue
                if not isinstance(obj, dict):
                    if kind == "ERROR":
                        raise ValueError(f"malformed watch event: {line[:100]!r}")
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._skip(
                            obj, ValueError(f"{kind} event with an object that is not a mapping"), served
                        )
                    continue
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone()
                    raise ApiStatusError(int(obj.get("code") or 0), str(obj.get("message", "")))
                meta = obj.get("metadata")
                new_rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
                if kind == "ADDED" or kind == "MODIFIED":
                    obj.setdefault("apiVersion", served.api_version)
                    obj.setdefault("kind", served.kind)
                    if self._unserved_owners and kind == "ADDED":
                        self._note_owners(meta)
                    self._apply(store.upsert, project(obj), served)
                elif kind == "DELETED":
                    obj.setdefault("apiVersion", served.api_version)
                    obj.setdefault("kind", served.kind)
                    self._apply(store.remove, obj, served)
                if new_rv:
                    cursor.rv = rv = str(new_rv)
            return rv
        finally:
            resp.release()

    def _note_owners(self, meta: object) -> None:
        """A new object owned by a watched workload kind that was not served (a JobSet's Job, a
        PyTorchJob's pod): its CRD is installed now, and discovery is asked at once, so that its
        pods are grouped by it from the start rather than below it until the next period."""
        refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
        for ref in refs if isinstance(refs, list) else ():
            if isinstance(ref, dict):
                kind = (api_group(str(ref.get("apiVersion", ""))), str(ref.get("kind", "")))
                if kind in self._unserved_owners:
                    self._look_again.set()
                    return

    # ---- writes ------------------------------------------------------------------------------

    def _pod_path(self, namespace: str, name: str, sub: str = "") -> str:
        return f"/api/v1/namespaces/{namespace}/pods/{name}" + (f"/{sub}" if sub else "")

    async def bind_pod(
        self, *, namespace: str, name: str, uid: str, node: str, persist_s: float = 0.0
    ) -> None:
        """POST pods/binding, retried for up to `persist_s` while the API server cannot answer. A 409
        where the pod is already on `node` is success (a retried bind, or one whose reply was lost)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        what = f"bind {namespace}/{name} to {node}"
        fence_ms = math.ceil(self.bind_fence_s * 1000)
        status, data = await self._write(
            "POST",
            self._pod_path(namespace, name, "binding"),
            body=body,
            what=what,
            write="bind",
            expected=(409,),
            query=[("timeout", f"{fence_ms}ms")] if fence_ms > 0 else None,
            persist_s=persist_s,
        )
        if status in (200, 201):
            return
        if status == 409:
            current, current_uid = await self._pod_node(namespace, name)
            if uid and current_uid and current_uid != uid:
                self._count_write_error("bind", status)
                raise BindError(
                    f"pod {namespace}/{name} was deleted and recreated (uid {current_uid}, not {uid})"
                )
            if current == node:
                return
            self._count_write_error("bind", status)
            raise BindError(
                f"pod {namespace}/{name} is already bound to {current or 'another node'}, not {node}"
            )
        if status == 0:
            raise BindError(
                f"could not reach the API server to {what}: {data.decode('utf-8', 'replace')}", unknown=True
            )
        err = _status_message(status, data)
        raise BindError(f"API server refused to {what}: {err.message or err}", unknown=status >= 500)

    async def _pod_node(self, namespace: str, name: str) -> tuple[str | None, str | None]:
        """(spec.nodeName, metadata.uid) of the pod as the API has it now; Nones when unreadable."""
        try:
            status, data = await self._request("GET", self._pod_path(namespace, name))
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None, None
        if status != 200:
            return None, None
        pod = orjson.loads(data)
        return (pod.get("spec") or {}).get("nodeName"), (pod.get("metadata") or {}).get("uid")

    async def set_pod_condition(self, *, namespace: str, name: str, condition: dict[str, Any]) -> None:
        """Strategic-merge one condition into status.conditions (merged by `type` on the server)."""
        cond = dict(condition)
        cond.setdefault("lastTransitionTime", _now_rfc3339())
        body = {"status": {"conditions": [cond]}}
        what = f"set condition {cond.get('type')} on pod {namespace}/{name}"
        status, data = await self._write(
            "PATCH",
            self._pod_path(namespace, name, "status"),
            body=body,
            content_type=_STRATEGIC_PATCH,
            what=what,
            write="condition",
        )
        self._report(status, data, what)

    async def nudge_pod(self, *, namespace: str, name: str, value: str) -> None:
        """A one-annotation patch: the pod update moves it out of kube-scheduler's backoff queue now."""
        body = {"metadata": {"annotations": {labels.NUDGE: value}}}
        what = f"nudge pod {namespace}/{name}"
        status, data = await self._write(
            "PATCH",
            self._pod_path(namespace, name),
            body=body,
            content_type=_MERGE_PATCH,
            what=what,
            write="nudge",
        )
        self._report(status, data, what)

    async def emit_event(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        kind: str,
        reason: str,
        message: str,
        event_type: str = "Normal",
        api_version: str = "",
    ) -> None:
        """A core/v1 Event on the object; a repeat of a reason on one object within the window is dropped.

        `api_version` is the object's ("scheduling.run.ai/v2alpha2"); without it, the version this
        source watches the kind at (ambiguous for PodGroup, served by two groups)."""
        key = (uid or f"{kind}/{namespace}/{name}", reason)
        now = self._clock()
        last = self._last_event_s.get(key)
        if last is not None and now - last < self._settings.event_interval_s:
            return
        self._last_event_s[key] = now
        if len(self._last_event_s) > 50_000:
            self._forget_old_events(now)
        stamp = _now_rfc3339()
        involved: dict[str, Any] = {"kind": kind, "namespace": namespace, "name": name, "uid": uid}
        api_version = api_version or self._api_version_of(kind)
        if api_version:
            involved["apiVersion"] = api_version
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": self._settings.component},
            "reportingComponent": self._settings.component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        what = f"event {reason} on {kind} {namespace}/{name}"
        status, data = await self._write(
            "POST", f"/api/v1/namespaces/{namespace}/events", body=body, what=what, write="event"
        )
        self._report(status, data, what)

    def _forget_old_events(self, now: float) -> None:
        horizon = now - self._settings.event_interval_s
        self._last_event_s = {k: t for k, t in self._last_event_s.items() if t >= horizon}

    def _api_version_of(self, kind: str) -> str:
        """The version this source watches `kind` at; "" when it watches none or several (PodGroup is
        served by scheduling.run.ai and scheduling.k8s.io: the caller must say which)."""
        if kind == "Pod":
            return "v1"
        found = {served.api_version for served in self._served.values() if served.kind == kind}
        return found.pop() if len(found) == 1 else ""

    async def patch_group_status(
        self, *, group: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Merge-patch `status` on the group object's /status subresource, or the object if it has none.
        True when written or moot (the object gone, the write refused for good); False when the API
        server did not answer after `_write`'s tries: the caller writes it again later.

        Only the fields the served schema keeps are written: a field the answer lacks although the patch
        set it was pruned by the API server (its CRD version does not define it), and is left out of
        every later write of that kind."""
        served = self._served.get((group, kind))
        what = f"status of {kind}.{group} {namespace}/{name}"
        if served is None:
            log.warning("cannot write %s: the API server does not serve that kind", what)
            return True
        path = served.object_path(namespace=namespace, name=name)
        since = self._clock() - self._settings.status_field_recheck_s
        dropped = {k for k, seen in self._status_dropped.get((group, kind), {}).items() if seen > since}
        status = {k: v for k, v in status.items() if k not in dropped}
        if not status:
            return True
        body = {"status": status}
        code, data = await self._write(
            "PATCH",
            f"{path}/status",
            body=body,
            content_type=_MERGE_PATCH,
            what=what,
            write="group-status",
            expected=(404,),
        )
        if code == 404 and await self._exists(path):
            code, data = await self._write(
                "PATCH", path, body=body, content_type=_MERGE_PATCH, what=what, write="group-status"
            )
        elif code == 404:
            self._count_write_error("group-status", code)
        if 200 <= code < 300:
            self._learn_dropped_status(group, kind, status, data)
        self._report(code, data, what)
        return not (code == 0 or _retryable(code))

    def _learn_dropped_status(self, group: str, kind: str, written: dict[str, Any], answer: bytes) -> None:
        try:
            stored = orjson.loads(answer).get("status") or {}
        except (orjson.JSONDecodeError, AttributeError):
            return  # an answer we cannot read teaches nothing
        if not isinstance(stored, dict):
            return
        pruned = {k for k, v in written.items() if v is not None and k not in stored}
        known = self._status_dropped.setdefault((group, kind), {})
        for field in written:
            known.pop(field, None)  # written and kept (or removed on purpose): defined again
        if pruned:
            now = self._clock()
            known.update(dict.fromkeys(pruned, now))
            log.info(
                "the API server drops status field(s) %s of %s.%s (its schema does not define them); "
                "left out of writes for %.0f s",
                ", ".join(sorted(pruned)),
                kind,
                group,
                self._settings.status_field_recheck_s,
            )

    async def _exists(self, path: str) -> bool:
        try:
            status, _ = await self._request("GET", path)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False
        return status == 200

    def _report(self, status: int, data: bytes, what: str) -> None:
        if 200 <= status < 300 or status == 0 or _retryable(status):
            return  # success, or already logged by _write after its last try
        if status == 404:
            log.info("%s: object is gone", what)
            return
        log.warning("%s refused: %s", what, _status_message(status, data))

    # ---- objects this service keeps (the podgrouper's PodGroups) -------------------------------

    def _served_path(self, group: str, kind: str, namespace: str, name: str, what: str) -> str | None:
        served = self._served.get((group, kind))
        if served is None:
            log.warning("cannot %s: the API server does not serve %s.%s", what, kind, group)
            return None
        return served.object_path(namespace=namespace, name=name)

    async def create_object(self, *, group: str, kind: str, obj: dict[str, Any]) -> bool:
        """POST `obj`; True when it exists now (409 AlreadyExists included: whoever made it, the
        watch shows it and the caller decides), False when it should be tried again later."""
        m = obj.get("metadata") or {}
        ns, name = str(m.get("namespace", "")), str(m.get("name", ""))
        what = f"create {kind}.{group} {ns}/{name}"
        path = self._served_path(group, kind, ns, name, what)
        if path is None:
            return False
        status, data = await self._write(
            "POST", path.rpartition("/")[0], body=obj, what=what, write=kind.lower(), expected=(409,)
        )
        if status in (200, 201, 409):
            return True
        self._report(status, data, what)
        return False

    async def patch_object(
        self, *, group: str, kind: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> bool:
        """Merge-patch the object; True when patched or already gone (its deletion is watched)."""
        what = f"update {kind}.{group} {namespace}/{name}"
        path = self._served_path(group, kind, namespace, name, what)
        if path is None:
            return False
        status, data = await self._write(
            "PATCH",
            path,
            body=patch,
            content_type=_MERGE_PATCH,
            what=what,
            write=kind.lower(),
            expected=(404,),
        )
        self._report(status, data, what)
        return 200 <= status < 300 or status == 404

    async def delete_object(self, *, group: str, kind: str, namespace: str, name: str, uid: str) -> bool:
        """DELETE the object of that uid; True when deleted, gone, or replaced by another (409)."""
        what = f"delete {kind}.{group} {namespace}/{name}"
        path = self._served_path(group, kind, namespace, name, what)
        if path is None:
            return False
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        status, data = await self._write(
            "DELETE", path, body=body, what=what, write=kind.lower(), expected=(404, 409)
        )
        if status in (404, 409):
            return True
        self._report(status, data, what)
        return 200 <= status < 300

    # ---- evictions ---------------------------------------------------------------------------

    async def _eviction_api_version(self) -> str:
        """policy/v1 where the server serves it (1.22 on), else policy/v1beta1; asked once."""
        if self._eviction_version is None:
            status, data = await self._request("GET", "/apis/policy")
            versions: list[str] = []
            if status == 200:
                versions = [v.get("version", "") for v in orjson.loads(data).get("versions") or []]
            elif status != 404:
                raise _status_message(status, data)
            self._eviction_version = "v1" if "v1" in versions or not versions else "v1beta1"
        return f"policy/{self._eviction_version}"

    async def evict_pod(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        """POST pods/{name}/eviction for the pod of that uid. 404 (gone) and 409 (replaced by another
        pod of that name) are moot: True. 429 is a PodDisruptionBudget refusing for now: False, the
        caller asks again on a later pass. No answer (EvictionUnanswered) may have landed; any other
        refusal, or no Eviction API to ask, is EvictionFailed."""
        what = f"evict pod {namespace}/{name}"
        try:
            api_version = await self._eviction_api_version()
        except (TimeoutError, aiohttp.ClientError, OSError, ApiStatusError) as exc:
            self._count_write_error("evict", getattr(exc, "status", 0))
            log.warning("cannot %s: API discovery of policy failed: %s", what, exc)
            raise EvictionFailed(f"cannot {what}: API discovery of policy failed: {exc}") from exc
        body: dict[str, Any] = {
            "apiVersion": api_version,
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        status, data = await self._write(
            "POST",
            self._pod_path(namespace, name, "eviction"),
            body=body,
            what=f"{what} ({reason})",
            write="evict",
            expected=(404, 409),
        )
        if 200 <= status < 300:
            log.info("evicted pod %s: %s", f"{namespace}/{name}", reason)
            return True
        if status in (404, 409):
            return True
        if status == 429:
            log.warning(
                "%s refused for now (%s); asked again on a later pass: %s",
                what,
                _status_message(status, data).message or "too many requests",
                reason,
            )
            return False
        if not status or status >= 500:  # it may have landed: the caller counts the pod as going a while
            raise EvictionUnanswered(f"no answer to {what}: {_status_message(status, data).message}")
        self._report(status, data, what)
        raise EvictionFailed(f"cannot {what}: {_status_message(status, data).message}")
