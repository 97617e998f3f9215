"""The seam between the cache and where cluster objects come from (an embedded file or a live API).

A source feeds a ClusterStore and performs the few writes the service needs. Two implementations:
`state.embedded.EmbeddedCluster` (in memory) and `state.kube.KubeClusterSource` (list+watch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from extender.state.store import ClusterStore

log = logging.getLogger(__name__)


class SourceFatalError(Exception):
    """The source cannot go on as configured (the API server refuses its credentials): the service
    exits non-zero with this one-line reason instead of staying up, unready, forever."""


class BindError(Exception):
    """A binding the API refused; the message is shown to kube-scheduler and the operator.
    `unknown`: no answer came (the API server unreachable, a 5xx), so it may have been applied all
    the same; the watch tells."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.unknown = unknown


class EvictionFailed(Exception):
    """An eviction that was not asked (the Eviction API not found) or that the API refused for good
    (403, 422): no disruption budget's "not now", so nothing protects the pod from the next ask."""


class EvictionUnanswered(Exception):
    """An eviction whose answer never came (the API server unreachable, a timeout, a 5xx after
    every retry): it may have been applied all the same; the watch tells."""


def _object_ref(obj: Any, kind: str) -> str:
    """ "Kind namespace/name" of an object, for a log line; bounded, whatever the object holds."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    ns, name = meta.get("namespace"), meta.get("name")
    ref = f"{kind} {f'{ns}/' if ns else ''}{name or '?'}"
    return ref if len(ref) <= 200 else ref[:200] + "..."


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one bounded line: "Type: message"."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[:limit] + "..."


class SkippedObjects:
    """Objects a source could not apply to the store: each is counted, logged once and skipped, so
    one bad object never stops the source. Both sources keep one; /metrics reports the count."""

    def __init__(self) -> None:
        self.count = 0
        self.last = ""
        """The newest of them and why, one bounded line: "Pod ns/name: OverflowError: ..."."""

    def apply(self, op: Callable[[dict[str, Any]], None], obj: dict[str, Any], kind: str) -> bool:
        """`op(obj)` (store.upsert or store.remove); False when the object was skipped."""
        try:
            op(obj)
        except Exception as exc:  # whatever one object does, the cluster source goes on
            self.skip(obj, exc, kind)
            return False
        return True

    def skip(self, obj: Any, exc: BaseException, kind: str) -> None:
        ref = _object_ref(obj, kind)
        self.count += 1
        self.last = f"{ref}: {one_line(exc)}"
        log.error("skipping %s (the cache goes on without it)", self.last)
        log.debug("traceback for %s", ref, exc_info=exc)


class ClusterSource(Protocol):
    bind_fence_s: float
    """How long after start-up this process must bind nothing: a predecessor killed with binding
    POSTs in flight may have them land until then, and no cache can see a binding before it lands.
    0 where no other process can bind into the same cluster (the embedded one lives in this process)."""

    async def run(self, store: ClusterStore) -> None:
        """List every kind into the store, mark synced, then keep it fed until cancelled."""

    def is_synced(self) -> bool: ...

    async def bind_pod(
        self, *, namespace: str, name: str, uid: str, node: str, persist_s: float = 0.0
    ) -> None:
        """Bind the pod to the node, or raise BindError saying why not. `persist_s`: how long the
        caller can wait for an API server that cannot answer now (the bind keeps trying meanwhile)."""

    async def set_pod_condition(self, *, namespace: str, name: str, condition: dict[str, Any]) -> None: ...

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
    ) -> None: ...

    async def nudge_pod(self, *, namespace: str, name: str, value: str) -> None: ...

    async def patch_group_status(
        self, *, group: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Write the group object's status; True when written or moot (gone, refused for good),
        False: the API server did not answer, try again later."""

    async def create_object(self, *, group: str, kind: str, obj: dict[str, Any]) -> bool:
        """Create `obj`; True when it exists now (already existing included), False: try again later."""

    async def patch_object(
        self, *, group: str, kind: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> bool:
        """Merge-patch the object; True when patched or gone, False: try again later."""

    async def delete_object(self, *, group: str, kind: str, namespace: str, name: str, uid: str) -> bool:
        """Delete the object if it still has `uid`; True when done or moot, False: try again later."""

    async def evict_pod(self, *, namespace: str, name: str, uid: str, reason: str) -> bool:
        """Evict the pod if it still has `uid` (the Eviction API: PodDisruptionBudgets hold); True when
        evicted or already gone, False: refused for now (a budget), the caller asks again later."""
