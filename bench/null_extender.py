"""The null handler: the same framework (aiohttp + orjson), parses the body, answers trivially.

It is the yardstick of bench/http.py: what any Python extender pays before deciding anything.
Run: python -m bench.null_extender --port PORT

With --echo it is the null extender of bench/scheduler.py: filter passes every offered node
(decoded and encoded again, as any extender that looks at the names must), bind POSTs the Binding
to the API server (--api-server, --token-file; loopback, certificate not verified) and preempt
agrees with kube-scheduler's victims. The same verbs as the service, deciding nothing.
"""

from __future__ import annotations

import argparse

import aiohttp
import orjson
from aiohttp import web

API = web.AppKey("api", dict)


async def null_filter(request: web.Request) -> web.Response:
    doc = orjson.loads(await request.read())
    names = doc.get("NodeNames") or []
    reply = {
        "Nodes": None,
        "NodeNames": names if request.app[API]["echo"] else names[:1],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    return web.Response(body=orjson.dumps(reply), content_type="application/json")


async def null_bind(request: web.Request) -> web.Response:
    doc = orjson.loads(await request.read())
    api = request.app[API]
    ns, name = doc["PodNamespace"], doc["PodName"]
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": doc.get("PodUID") or None},
        "target": {"apiVersion": "v1", "kind": "Node", "name": doc["Node"]},
    }
    url = f"{api['server']}/api/v1/namespaces/{ns}/pods/{name}/binding"
    async with api["session"].post(url, data=orjson.dumps(binding)) as resp:
        error = "" if resp.status in (200, 201) else f"binding answered {resp.status}: {await resp.text()}"
    return web.Response(body=orjson.dumps({"Error": error}), content_type="application/json")


async def null_preempt(request: web.Request) -> web.Response:
    doc = orjson.loads(await request.read())
    victims = doc.get("NodeNameToMetaVictims") or {}
    body = orjson.dumps({"NodeNameToMetaVictims": victims})
    return web.Response(body=body, content_type="application/json")


async def ready(request: web.Request) -> web.Response:
    return web.Response(text="ready\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--echo", action="store_true", help="filter passes every offered node")
    parser.add_argument("--api-server", default="", help="API server URL for bind (with --echo)")
    parser.add_argument("--token-file", default="", help="bearer token for the API server")
    args = parser.parse_args()
    app = web.Application(client_max_size=256 * 2**20)
    app[API] = {"echo": args.echo, "server": args.api_server.rstrip("/")}

    async def session(app: web.Application):  # type: ignore[no-untyped-def]
        headers = {"Content-Type": "application/json"}
        if args.token_file:
            with open(args.token_file) as fh:
                headers["Authorization"] = f"Bearer {fh.read().strip()}"
        connector = aiohttp.TCPConnector(ssl=False, limit=64)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as s:
            app[API]["session"] = s
            yield

    app.cleanup_ctx.append(session)
    app.router.add_post("/filter", null_filter)
    app.router.add_post("/bind", null_bind)
    app.router.add_post("/preempt", null_preempt)
    app.router.add_get("/readyz", ready)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
