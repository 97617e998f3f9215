"""Reading what the API server serves when one object in it is nested deeper than orjson reads.

orjson refuses JSON nested past 1,024 levels; the API server stores objects up to 10,000 deep (Go's
encoding/json limit), which a custom resource with `x-kubernetes-preserve-unknown-fields` reaches
with no help from any schema. One such object must not cost the cache its whole kind: a list page
that holds it would fail each relist, and a watch event that carries it would restart the watch
at the same event forever. So, only when orjson refuses a page or an event, it is split here into
its objects by the structure of its bytes (`_Scan`: where each string, object and array begins and
ends, found with array operations over the bytes, with no recursion, so no depth is too deep), each
object is decoded alone, and one that cannot be comes back as `Unreadable`: its name and the reason,
for the source to skip it and go on. Nothing here runs while orjson reads the bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import orjson

API_SERVER_DEPTH = 10_000
"""The deepest JSON the API server accepts (Go's encoding/json `maxNestingDepth`)."""
DECODER_DEPTH = 1024
"""The deepest JSON orjson reads."""

_WHITESPACE = b" \t\r\n"


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """An object the service cannot decode. `ref` is what could be read of it (its metadata's name,
    namespace and resourceVersion, each when it is a string) in an object's shape, for a log line,
    a key and the watch's cursor; `error` says why, in words an operator can act on."""

    ref: dict[str, Any]
    error: ValueError


class _Scan:
    """The structure of one JSON text: the depth of objects and arrays after each byte, and where its
    commas and colons outside strings are. Assumes the text is valid JSON (orjson said where it is
    not, and only its depth is in question): it is checked again wherever a part of it is decoded."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        buf = np.frombuffer(data, dtype=np.uint8)
        n = len(buf)
        at = np.arange(n, dtype=np.int32)
        # a quote is escaped when an odd run of backslashes precedes it (escapes live in strings only)
        plain = np.maximum.accumulate(np.where(buf == 0x5C, -1, at)) if n else at
        quotes = np.flatnonzero(buf == 0x22)
        before = quotes - 1
        run = np.where(before >= 0, before - plain[np.maximum(before, 0)], 0)
        toggles = np.zeros(n, dtype=np.int8)
        toggles[quotes[run % 2 == 0]] = 1
        # inside a string: from its opening quote up to, not with, its closing one
        inside = (np.cumsum(toggles, dtype=np.int32) % 2).astype(bool)
        outside = ~inside & (toggles == 0)
        opens = outside & ((buf == 0x7B) | (buf == 0x5B))
        closes = outside & ((buf == 0x7D) | (buf == 0x5D))
        self.depth = np.cumsum(opens.astype(np.int32) - closes.astype(np.int32), dtype=np.int32)
        self.commas = np.flatnonzero(outside & (buf == 0x2C))
        self.colons = np.flatnonzero(outside & (buf == 0x3A))

    def value_end(self, start: int, stop: int) -> int:
        """The end (exclusive) of the value starting at `start` (no whitespace before it), within
        `stop`: an object or array ends at its closing bracket, anything else at `stop`."""
        if self.data[start : start + 1] not in (b"{", b"["):
            return stop
        level = int(self.depth[start]) - 1
        back = np.flatnonzero(self.depth[start:stop] == level)
        if not len(back):
            raise ValueError("an object or array is not closed")
        return start + int(back[0]) + 1

    def elements(self, start: int, end: int) -> list[tuple[int, int]]:
        """The spans of the elements of the object or array `data[start:end]` (members "k": v of an
        object), each without the whitespace around it."""
        level = int(self.depth[start])
        lo, hi = np.searchsorted(self.commas, [start, end - 1])
        cuts = [c for c in self.commas[lo:hi].tolist() if self.depth[c] == level]
        spans = []
        for a, b in zip([start, *cuts], [*cuts, end - 1], strict=True):
            part = self.data[a + 1 : b]
            stripped = part.strip(_WHITESPACE)
            if stripped:
                first = a + 1 + part.index(stripped[:1])
                spans.append((first, first + len(stripped)))
        return spans

    def members(self, start: int, end: int) -> dict[str, tuple[int, int]]:
        """The members of the object `data[start:end]`: each key and the span of its value."""
        out: dict[str, tuple[int, int]] = {}
        for a, b in self.elements(start, end):
            at = int(np.searchsorted(self.colons, a))
            if at >= len(self.colons) or self.colons[at] >= b:
                raise ValueError("an object member has no colon")
            colon = int(self.colons[at])
            key = orjson.loads(self.data[a:colon])
            part = self.data[colon + 1 : b]
            stripped = part.lstrip(_WHITESPACE)
            out[str(key)] = (b - len(stripped), b)
        return out

    def top(self) -> dict[str, tuple[int, int]]:
        """The members of the top-level object."""
        text = self.data.rstrip(_WHITESPACE)
        start = len(self.data) - len(self.data.lstrip(_WHITESPACE))
        if (
            text[start : start + 1] != b"{"
            or not text.endswith(b"}")
            or self.value_end(start, len(text)) != len(text)
        ):
            raise ValueError("not one JSON object")
        return self.members(start, len(text))


def _decoded(scan: _Scan, start: int, end: int) -> Any:
    """The value at `data[start:end]`, or Unreadable when orjson refuses it."""
    try:
        return orjson.loads(memoryview(scan.data)[start:end])
    except orjson.JSONDecodeError as exc:
        reason = str(exc)
    ref: dict[str, Any] = {}
    try:
        if scan.data[start : start + 1] == b"{":
            meta = scan.members(start, end).get("metadata")
            if meta is not None and scan.data[meta[0] : meta[0] + 1] == b"{":
                for key, (a, b) in scan.members(*meta).items():
                    if key in ("name", "namespace", "resourceVersion") and scan.data[a : a + 1] == b'"':
                        ref[key] = orjson.loads(scan.data[a:b])
    except (ValueError, orjson.JSONDecodeError):
        pass  # its name cannot be read either: it is reported without one
    why = (
        f"nested deeper than the {DECODER_DEPTH} levels this service reads (the API server stores up to "
        f"{API_SERVER_DEPTH})"
        if "depth" in reason
        else "not JSON this service reads"
    )
    return Unreadable(
        ref={"metadata": ref},
        error=ValueError(f"it cannot be decoded, {why} ({reason}): edit or delete the object"),
    )


def _split(data: bytes, first: orjson.JSONDecodeError) -> tuple[_Scan, dict[str, tuple[int, int]]]:
    try:
        scan = _Scan(data)
        return scan, scan.top()
    except (ValueError, orjson.JSONDecodeError):
        raise first from None


def loads_page(data: bytes) -> dict[str, Any]:
    """A list page as `orjson.loads` gives it, except that an item orjson cannot decode (nested too
    deep) is `Unreadable` in `items`. Raises orjson's error when the page is not one JSON object, or
    when a part of it other than an item cannot be decoded."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        first = exc
    scan, top = _split(data, first)
    out: dict[str, Any] = {}
    for key, (start, end) in top.items():
        if key == "items" and data[start : start + 1] == b"[":
            out[key] = [_decoded(scan, a, b) for a, b in scan.elements(start, end)]
        else:
            out[key] = orjson.loads(memoryview(data)[start:end])
    return out


def loads_event(line: bytes) -> Any:
    """A watch event as `orjson.loads` gives it, except that an object orjson cannot decode (nested
    too deep) is `Unreadable` in `object`. Raises orjson's error when the line is not one JSON object
    with an object, or when a part of it other than the object cannot be decoded."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        first = exc
    scan, top = _split(line, first)
    if "object" not in top:
        raise first
    out: dict[str, Any] = {}
    for key, (start, end) in top.items():
        out[key] = (
            _decoded(scan, start, end) if key == "object" else orjson.loads(memoryview(line)[start:end])
        )
    return out
