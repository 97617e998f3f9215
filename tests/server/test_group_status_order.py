"""Group status writes land newest last, however their PATCHes interleave (effects run as tasks)."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.config import default_settings
from extender.scheduling.decisions import Effect
from extender.server.app import _run_effects, build_app
from extender.state.embedded import EmbeddedCluster
from tests.builders import make_node


class SlowStatus(EmbeddedCluster):
    """Holds each status PATCH until the test lets it through; records what was written, in order."""

    def __init__(self) -> None:
        super().__init__([make_node("n0")])
        self.written: list[str] = []
        self.gate = asyncio.Event()

    async def patch_group_status(
        self, *, group: str, kind: str, namespace: str, name: str, status: Any
    ) -> None:
        await self.gate.wait()
        self.written.append(status["phase"])


def status(phase: str) -> Effect:
    data = {"group": "scheduling.run.ai", "kind": "PodGroup", "status": {"phase": phase}}
    return Effect("group-status", "ns", "pg", data)


async def test_a_status_decided_while_one_is_in_flight_is_written_after_it() -> None:
    source = SlowStatus()
    app = build_app(default_settings(), source=source)
    first = asyncio.ensure_future(_run_effects(app, [status("Pending")]))
    await asyncio.sleep(0)  # the Pending PATCH is in flight
    second = asyncio.ensure_future(_run_effects(app, [status("Running")]))
    third = asyncio.ensure_future(_run_effects(app, [status("Running")]))
    await asyncio.sleep(0)
    source.gate.set()
    await asyncio.gather(first, second, third)
    assert source.written[-1] == "Running", source.written
    assert source.written == ["Pending", "Running"], "one writer per group: the newest in flight, no more"
    # and a later write for the group starts afresh
    await _run_effects(app, [status("Pending")])
    assert source.written[-1] == "Pending"


async def test_a_status_that_arrives_after_a_later_decision_is_dropped() -> None:
    """A tick's Pending waits behind its members' condition writes and reaches the writer after the
    release's Running, decided later: the group keeps Running (the order of decision, not of arrival)."""
    source = SlowStatus()
    source.gate.set()
    app = build_app(default_settings(), source=source)

    def decided(phase: str, order: int) -> Effect:
        e = status(phase)
        e.data["decided"] = order
        return e

    await _run_effects(app, [decided("Pending", 1)])
    await _run_effects(app, [decided("Running", 3)])
    await _run_effects(app, [decided("Pending", 2)])  # decided before the Running, arriving after it
    assert source.written == ["Pending", "Running"]
    await _run_effects(app, [decided("Pending", 4)])  # a newer decision is written
    assert source.written[-1] == "Pending"
