"""A test double of the extender service: the same wire protocol, trivial decisions.

Only for tests of the simulator's driver; the real service is extender/server. It passes every
node it is sent (unless told to reject a pod), scores nodes by name, and binds through the
embedded cluster as the real service does. Hooks let a test script rejections, nudges and a bind
barrier.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web


class WireDouble:
    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.reject: Callable[[dict[str, Any]], str | None] = lambda pod: None
        self.bind_gate: asyncio.Event | None = None
        self.binds_waiting = 0
        self.max_binds_waiting = 0
        self.filter_error: str = ""
        self.calls: list[str] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/filter", self.filter)
        app.router.add_post("/prioritize", self.prioritize)
        app.router.add_post("/bind", self.bind)
        return app

    async def filter(self, request: web.Request) -> web.Response:
        self.calls.append("filter")
        body = orjson.loads(await request.read())
        assert set(body) == {"Pod", "Nodes", "NodeNames"} and body["Nodes"] is None
        names = body["NodeNames"]
        if self.filter_error:
            return _json(
                {
                    "NodeNames": None,
                    "FailedNodes": None,
                    "FailedAndUnresolvableNodes": None,
                    "Error": self.filter_error,
                }
            )
        reason = self.reject(body["Pod"])
        if reason:
            return _json(
                {
                    "NodeNames": [],
                    "FailedNodes": dict.fromkeys(names, reason),
                    "FailedAndUnresolvableNodes": None,
                    "Error": "",
                }
            )
        return _json(
            {"NodeNames": names, "FailedNodes": None, "FailedAndUnresolvableNodes": None, "Error": ""}
        )

    async def prioritize(self, request: web.Request) -> web.Response:
        self.calls.append("prioritize")
        body = orjson.loads(await request.read())
        # the alphabetically first node wins, so placements are predictable
        ranked = sorted(body["NodeNames"])
        return _json([{"Host": n, "Score": 10 if i == 0 else 0} for i, n in enumerate(ranked)])

    async def bind(self, request: web.Request) -> web.Response:
        self.calls.append("bind")
        body = orjson.loads(await request.read())
        assert set(body) == {"PodName", "PodNamespace", "PodUID", "Node"}
        if self.bind_gate is not None:
            self.binds_waiting += 1
            self.max_binds_waiting = max(self.max_binds_waiting, self.binds_waiting)
            await self.bind_gate.wait()
            self.binds_waiting -= 1
        await self.cluster.bind_pod(
            namespace=body["PodNamespace"], name=body["PodName"], uid=body["PodUID"], node=body["Node"]
        )
        return _json({"Error": ""})


def _json(obj: Any) -> web.Response:
    return web.Response(body=orjson.dumps(obj), content_type="application/json")
