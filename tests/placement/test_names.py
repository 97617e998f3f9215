"""rows_of_names maps a NodeNames array's raw bytes to rows, as decoding it and looking each name up would.

The reference is the plain-Python way: `json.loads` the array, then a dict lookup per name. The kernel
may decline (None) only when the bytes need decoding (an escape, a control byte) or are not an array
of strings, or when two indexed names share a fingerprint. It looks names up by a 63-bit fingerprint
(`NameIndex`): an unknown name could pass for a known one only through a collision, about 2^-63 per
pair, which no test here can meet; the bind verb checks the name exactly in any case.
"""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.placement import index_names, rows_of_names

NAMES = {0: "node-a", 3: "node-b", 7: "n", 9: "x" * 100, 10: "x" * 99 + "y", 12: "nœud-é"}


def reference(row_names: dict[int, str], array: bytes) -> list[int] | None:
    try:
        names = json.loads(array)
    except ValueError:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    rows = {name: row for row, name in row_names.items()}
    return [rows.get(n, -1) for n in names]


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (b'["node-b","node-a","zz"]', [3, 0, -1]),
        (b' [ "n" ,\n"node-a" ] ', [7, 0]),  # whitespace between tokens, as any JSON writer may put
        (b"[]", []),
        (b'["node-a","node-a"]', [0, 0]),  # repeats kept, in order
        (b'["node-", "node-ab", "", "N"]', [-1, -1, -1, -1]),  # prefixes, extensions, case
        ('["nœud-é"]'.encode(), [12]),  # UTF-8 written raw, as Go writes it
        (b'["' + b"x" * 100 + b'","' + b"x" * 99 + b'y","' + b"x" * 99 + b'z"]', [9, 10, -1]),  # long names
        (b'["node-\\u0061"]', None),  # an escape: decode first
        (b'["node-a"', None),
        (b'["node-a",]', None),
        (b'["node-a"] x', None),
        (b"[1]", None),
        (b'{"a": 1}', None),
        (b"", None),
        (b'["a\x01"]', None),  # a control byte is not valid inside a JSON string
    ],
    ids=[
        "names map to their rows, an unknown one to -1",
        "whitespace between tokens",
        "an empty array",
        "repeats",
        "near misses are unknown",
        "non-ASCII names",
        "long names that differ only in their last byte",
        "an escape sequence is declined",
        "an unterminated array is declined",
        "a trailing comma is declined",
        "trailing bytes are declined",
        "a number is declined",
        "an object is declined",
        "no bytes are declined",
        "a control byte is declined",
    ],
)
def test_rows_of_names(array: bytes, expected: list[int] | None) -> None:
    got = rows_of_names(index_names(NAMES), array)
    assert (None if got is None else got.tolist()) == expected
    if expected is not None:
        assert reference(NAMES, array) == expected


def test_an_empty_index_knows_no_name() -> None:
    assert rows_of_names(index_names({}), b'["a", "b"]').tolist() == [-1, -1]


name = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=70)


@settings(max_examples=150, deadline=None)
@given(
    known=st.lists(name, min_size=0, max_size=40, unique=True),
    strangers=st.lists(name, max_size=10),
    picks=st.lists(st.integers(min_value=0, max_value=10_000), max_size=60),
    spaced=st.booleans(),
)
def test_rows_of_names_agrees_with_decoding_and_looking_up(
    known: list[str], strangers: list[str], picks: list[int], spaced: bool
) -> None:
    row_names = {3 * i + 1: n for i, n in enumerate(known)}
    pool = known + strangers
    offered = [pool[p % len(pool)] for p in picks] if pool else []
    array = json.dumps(offered, ensure_ascii=False).encode() if spaced else orjson.dumps(offered)
    got = rows_of_names(index_names(row_names), array)
    expected = reference(row_names, array)
    if got is None:
        # declined only when a name needs an escape to be written
        assert any(c in n for n in offered for c in '"\\') or any(ord(c) < 32 for n in offered for c in n)
    else:
        assert got.tolist() == expected


def test_a_fingerprint_two_indexed_names_share_is_declined_not_guessed() -> None:
    index = index_names({0: "node-a", 1: "node-b"})
    # stand in for a collision (no two real names are known to share one): mark node-a's slot shared
    index.slot_rows[index.slot_rows == 0] = -2
    assert rows_of_names(index, b'["node-b"]').tolist() == [1]
    assert rows_of_names(index, b'["node-b","node-a"]') is None
