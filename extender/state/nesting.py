"""Reading what the API server serves when one object in it is nested deeper than orjson reads.

orjson refuses JSON nested past 1,024 levels; the API server stores objects up to 10,000 deep (Go's
encoding/json limit), which a custom resource with `x-kubernetes-preserve-unknown-fields` reaches
with no help from any schema. One such object must not cost the cache its whole kind: a list page
that holds it would fail each relist, and a watch event that carries it would restart the watch
at the same event forever. So, only when orjson refuses a page or an event, it is split into its
objects here (msgspec walks the nesting, undecoded, with the recursion allowance the depth needs),
each object is decoded alone, and the one that cannot be comes back as `Unreadable`: its name and
the reason, for the source to skip it and go on. Nothing here runs while orjson reads the bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from typing import Any, TypedDict

import msgspec
import orjson

API_SERVER_DEPTH = 10_000
"""The deepest JSON the API server accepts (Go's encoding/json `maxNestingDepth`)."""

_MARGIN = 200  # the frames below the decoder: the event loop, the source, this module


class _RefMeta(TypedDict, total=False):
    name: Any
    namespace: Any
    resourceVersion: Any


class _Ref(TypedDict, total=False):
    metadata: _RefMeta


class _Page(TypedDict, total=False):
    metadata: Any
    items: list[msgspec.Raw]


class _Event(TypedDict, total=False):
    type: Any
    object: msgspec.Raw


_PAGE = msgspec.json.Decoder(_Page)
_EVENT = msgspec.json.Decoder(_Event)
_REF = msgspec.json.Decoder(_Ref)


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """An object the service cannot decode. `ref` is what could be read of it (its metadata's name,
    namespace and resourceVersion, each when it is a string) in an object's shape, for a log line,
    a key and the watch's cursor; `error` says why, in words an operator can act on."""

    ref: dict[str, Any]
    error: ValueError


@contextlib.contextmanager
def _deep_enough() -> Iterator[None]:
    """Room for msgspec to walk the API server's deepest nesting (it counts Python's recursion)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, API_SERVER_DEPTH + _MARGIN))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _decoded(raw: msgspec.Raw) -> Any:
    try:
        return orjson.loads(memoryview(raw))
    except orjson.JSONDecodeError as exc:
        try:
            with _deep_enough():
                found = _REF.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            found = {}
        meta = found.get("metadata") or {}
        ref = {k: v for k, v in meta.items() if isinstance(v, str)}
        return Unreadable(
            ref={"metadata": ref},
            error=ValueError(
                f"it cannot be decoded ({exc}); this service reads objects nested up to 1024 levels "
                f"(the API server stores them up to {API_SERVER_DEPTH}): edit or delete the object"
            ),
        )


def loads_page(data: bytes) -> dict[str, Any]:
    """A list page as `orjson.loads` gives it, except that an item too deep to decode is `Unreadable`
    in `items`. Raises orjson's error when the page is not valid JSON of a list's shape."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        first = exc
    try:
        with _deep_enough():
            page = _PAGE.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise first from None
    out: dict[str, Any] = {"metadata": page.get("metadata") or {}}
    if "items" in page:
        out["items"] = [_decoded(item) for item in page["items"]]
    return out


def loads_event(line: bytes) -> Any:
    """A watch event as `orjson.loads` gives it, except that an object too deep to decode is
    `Unreadable` in `object`. Raises orjson's error when the line is not a valid event."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        first = exc
    try:
        with _deep_enough():
            event = _EVENT.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise first from None
    if "object" not in event:
        raise first
    return {"type": event.get("type"), "object": _decoded(event["object"])}
