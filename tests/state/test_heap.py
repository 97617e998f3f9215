"""heap.trim asks glibc to return free pages, and does nothing where it cannot ask."""

from __future__ import annotations

import ctypes
import platform

import pytest

from extender.state import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_asks_glibc() -> None:
    assert heap.trim() is True


def test_trim_does_nothing_without_malloc_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_libc(_: object) -> None:
        raise OSError("no C library here")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert heap.trim() is False


def test_settle_freezes_what_is_left_out_of_the_collectors_passes() -> None:
    import gc

    kept = [{"pod": i} for i in range(1000)]
    try:
        heap.settle()
        assert gc.get_freeze_count() >= len(kept)
        assert all(obj is not kept for obj in gc.get_objects())  # out of the collector's passes
    finally:
        gc.unfreeze()


def test_settle_spaces_the_collectors_passes_out() -> None:
    import gc

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # Python's own
        heap.settle()
        young, older, oldest = gc.get_threshold()
        assert young == heap.YOUNG_OBJECTS > 700
        assert older == oldest == heap.OLDER_PASSES
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
