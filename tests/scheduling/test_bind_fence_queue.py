"""The start-up bind fence and queue limits: a single pod (or a member beyond quorum) passed its
queue's limit at bind and holds its room while its POST waits out the fence. A predecessor's binding
that lands meanwhile in the same queue (or a descendant of its ancestors) may use the room the limit
left: the pod is then not bound, as the README promises no queue past its limit.

Found by `test_interleavings.py::test_random_interleavings_keep_the_gang_invariants[seed-7]`.
"""

from __future__ import annotations

import pytest

from tests.builders import make_node, make_pod
from tests.scheduling.test_bind_fence import FENCE_S, launch, predecessor_binds, settle, start
from tests.scheduling.test_interleavings import kai_queue

QUEUE = "kai.scheduler/queue"


def queued(name: str, queue: str, cpu: str) -> dict:
    return make_pod(name, cpu=cpu, labels={QUEUE: queue})


@pytest.mark.parametrize(
    ("case", "old_queue"),
    [
        ("the predecessor's pod is in the same queue", "team-a"),
        ("the predecessor's pod is in a sibling under the same limited parent", "team-b"),
    ],
)
async def test_a_predecessor_binding_landing_in_the_fence_over_the_queue_limit_stops_the_bind(
    make_service, case, old_queue
):
    objs = [
        make_node("a0", cpu="8"),
        make_node("a1", cpu="8"),
        kai_queue("org", None, quota=4000, limit=4000),
        kai_queue("team-a", "org", quota=4000, limit=4000),
        kai_queue("team-b", "org", quota=4000, limit=4000),
        queued("p", "team-a", "3"),
        queued("old", old_queue, "3"),
    ]
    svc = await start(make_service, objs)
    call = launch(svc, "p", "a0")
    await settle()
    assert "default/p" in svc.store.reservations, case  # admitted: 3 of org's 4 cores, held
    await predecessor_binds(svc, "old", "a1")  # the killed process's POST lands: org uses 3 cores
    await settle()
    await svc.expire(FENCE_S)
    error = await call
    assert svc.node_of("old") == "a1"
    assert svc.node_of("p") is None, f"{case}: org would use 6 cores, above its 4-core limit"
    assert "queue" in error and "limit" in error, error
    assert "default/p" not in svc.store.reservations, "the refused pod's hold is given back"
    svc.check_invariants()
