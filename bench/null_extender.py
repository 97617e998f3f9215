"""The null handler: the same framework (aiohttp + orjson), parses the body, answers trivially.

It is the yardstick of bench/http.py: what any Python extender pays before deciding anything.
Run: python -m bench.null_extender --port PORT
"""

from __future__ import annotations

import argparse

import orjson
from aiohttp import web


async def null_filter(request: web.Request) -> web.Response:
    doc = orjson.loads(await request.read())
    names = doc.get("NodeNames") or []
    reply = {
        "Nodes": None,
        "NodeNames": names[:1],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    return web.Response(body=orjson.dumps(reply), content_type="application/json")


async def ready(request: web.Request) -> web.Response:
    return web.Response(text="ready\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application(client_max_size=256 * 2**20)
    app.router.add_post("/filter", null_filter)
    app.router.add_get("/readyz", ready)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
