"""The start-up bind fence and queue limits: a single pod (or a member beyond quorum) passed its
queue's limit at bind and holds its room while its POST waits out the fence. A predecessor's binding
that lands meanwhile in the same queue (or a descendant of its ancestors) may use the room the limit
left: the pod is then not bound, as the README promises no queue past its limit.

Found by `test_interleavings.py::test_random_interleavings_keep_the_gang_invariants[seed-7]`.
"""

from __future__ import annotations

import functools

import pytest

from tests.builders import gang_pod, make_kai_podgroup, make_node, make_pod
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


async def test_a_predecessor_binding_landing_in_the_fence_over_the_queue_limit_drops_a_gang_plan(
    make_service,
):
    """A gang planned within the fence holds its room in its queue; the predecessor's pod of the same
    queue lands meanwhile. Released after the fence, the gang would take the queue past its limit:
    its first member to arrive finds the queue past the limit with the plan's room, and the plan
    is dropped; planned again, admission turns it away."""
    objs = [
        make_node("a0", cpu="8"),
        make_node("a1", cpu="8"),
        kai_queue("org", None, quota=4000, limit=4000),
        kai_queue("team-a", "org", quota=4000, limit=4000),
        make_kai_podgroup("g", min_member=2, queue="team-a"),
        *(gang_pod(f"g-{i}", "g", cpu="1", labels={QUEUE: "team-a"}) for i in range(2)),
        queued("old", "team-a", "3"),
    ]
    # the plan outlives the fence: what drops it is the landing, not its wait running out
    svc = await start(functools.partial(make_service, gang_wait_s=30.0, gang_hold_s=30.0), objs)
    assert (await svc.filter("g-0", ["a0"]))["NodeNames"]
    plan = svc.plan("default/g")
    calls = [launch(svc, pk.split("/")[1], node) for pk, node in plan.items()]
    await settle()
    await predecessor_binds(svc, "old", "a1")
    await settle()
    await svc.expire(FENCE_S)
    answers = [await c for c in calls]
    # the landing itself drops the plan (the fence's queue rule); were it missed, the first member's
    # bind would drop it for the limit: either way every call is refused and nothing binds
    assert all(a and ("replanning" in a or "has no plan" in a) for a in answers), answers
    bound = [n for n in ("g-0", "g-1") if svc.node_of(n)]
    assert bound == [], f"org would use 5 cores, above its 4-core limit: {bound} bound"
    doc = await svc.filter("g-0", ["a0"])
    assert doc["NodeNames"] == [], doc  # planned again: admission turns it away
    assert "in use 3000m, gang needs 2000m" in doc["FailedNodes"]["a0"], doc
    svc.check_invariants()
