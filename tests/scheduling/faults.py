"""The API server misbehaving at bind time, for scenarios over the embedded cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from extender.state.embedded import EmbeddedCluster
from extender.state.source import BindError


class ApiFaults:
    """Wraps the embedded cluster's bind as a busy or failing API server would answer it: after a
    delay, refusing some pods (BindError with `message`), or crashing mid-write for others."""

    def __init__(
        self,
        cluster: EmbeddedCluster,
        *,
        delay_s: float = 0.0,
        fail: Iterable[str] = (),
        crash: Iterable[str] = (),
        message: str = "the API refused it",
    ) -> None:
        self.real = cluster.bind_pod
        self.delay_s, self.fail, self.crash, self.message = delay_s, set(fail), set(crash), message

    async def __call__(
        self, *, namespace: str, name: str, uid: str, node: str, persist_s: float = 0.0
    ) -> None:
        await asyncio.sleep(self.delay_s)
        if name in self.crash:
            raise RuntimeError("connection reset in the middle of a write")
        if name in self.fail:
            raise BindError(self.message)
        await self.real(namespace=namespace, name=name, uid=uid, node=node)
