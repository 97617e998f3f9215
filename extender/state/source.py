"""The seam between the cache and where cluster objects come from (an embedded file or a live API).

A source feeds a ClusterStore and performs the few writes the service needs. Two implementations:
`state.embedded.EmbeddedCluster` (in memory) and `state.kube.KubeClusterSource` (list+watch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from extender.state.store import ClusterStore


class BindError(Exception):
    """A binding the API refused; the message is shown to kube-scheduler and the operator."""


class ClusterSource(Protocol):
    async def run(self, store: ClusterStore) -> None:
        """List every kind into the store, mark synced, then keep it fed until cancelled."""

    def is_synced(self) -> bool: ...

    async def bind_pod(self, *, namespace: str, name: str, uid: str, node: str) -> None: ...

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
    ) -> None: ...

    async def nudge_pod(self, *, namespace: str, name: str, value: str) -> None: ...

    async def patch_group_status(
        self, *, group: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None: ...
