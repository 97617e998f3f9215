"""A running service over an embedded cluster, reached over real HTTP on loopback."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer

from extender.config import default_settings
from extender.server.app import SCHEDULER, STORE, build_app
from extender.state.embedded import EmbeddedCluster
from tests.builders import rack_cluster


class Service:
    def __init__(self, client: TestClient, cluster: EmbeddedCluster) -> None:
        self.client = client
        self.cluster = cluster
        self.app = client.server.app
        self.store = self.app[STORE]
        self.scheduler = self.app[SCHEDULER]

    async def post(self, verb: str, doc=None, *, raw: bytes | None = None):
        data = raw if raw is not None else __import__("orjson").dumps(doc)
        resp = await self.client.post(f"/{verb}", data=data, headers={"Content-Type": "application/json"})
        body = await resp.read()
        return resp.status, body


@pytest.fixture
async def make_service():
    clients = []

    async def start(objects=None, **settings):
        cluster = EmbeddedCluster(objects if objects is not None else rack_cluster())
        app = build_app(default_settings(**settings), source=cluster)
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return Service(client, cluster)

    yield start
    for client in clients:
        await client.close()
