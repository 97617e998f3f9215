"""The expiry ticker and the clock it is given: on a clock a test moves by hand it runs when kicked
(each move of the clock kicks it), never on real time, so a randomized seed replays the same ticks on
a busy machine as on an idle one."""

from __future__ import annotations

import asyncio

from extender.server import app as app_module
from tests.builders import rack_cluster


async def test_a_clock_moved_by_hand_runs_the_ticker_only_when_kicked(make_service, monkeypatch):
    svc = await make_service(rack_cluster())
    svc.clock.moved_by_hand = True
    await svc.expire(0)  # one kick: from here the ticker waits for the next
    ran: list[float] = []
    monkeypatch.setattr(app_module, "_tick", lambda app: ran.append(svc.clock.now))
    # real time, with no kick: a ticker on real time wakes every 0.1 s (seed 516 of the randomized
    # interleavings diverged, one run in five on a loaded machine, on the holding passes those ran)
    await asyncio.sleep(0.25)
    assert ran == []
    await svc.expire(1.0)
    assert ran == [svc.clock.now]
