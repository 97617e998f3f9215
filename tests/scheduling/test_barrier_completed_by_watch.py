"""A barrier the watch completes is released by the ticker, not by an arrival that never comes.

A member whose binding POST landed while its reply was lost (an API server restart) is seen bound
by the watch; kube-scheduler's informer sees it too, so it never comes back to bind. The members
waiting at the barrier are bound at once, rather than waiting out the gang's hold with part of the
gang bound.
"""

from __future__ import annotations

import asyncio

from tests.builders import gang_pod, make_kai_podgroup, rack_cluster


def gang(name: str, n: int) -> list[dict]:
    return [make_kai_podgroup(name, min_member=n)] + [
        gang_pod(f"{name}-{i}", name, cpu="2") for i in range(n)
    ]


async def test_the_waiting_members_bind_when_the_last_one_is_seen_bound_on_its_planned_node(make_service):
    svc = await make_service(rack_cluster() + gang("train", 3), gang_release_on_first_bind=False)
    nodes = {}
    for n in ("train-0", "train-1", "train-2"):
        node, reason = await svc.schedule(n)
        assert node, f"{n}: {reason}"
        nodes[n] = node
    waiting = [asyncio.create_task(svc.bind(n, nodes[n])) for n in ("train-0", "train-1")]
    await svc.expire(0)  # both reach the barrier and wait there
    assert not any(t.done() for t in waiting)
    landed = svc.pod("train-2")
    landed["spec"]["nodeName"] = nodes["train-2"]  # its POST landed; its reply never came
    svc.cluster.apply(landed)
    await svc.expire(0)  # no time passes: the ticker alone releases the rest
    assert await asyncio.wait_for(asyncio.gather(*waiting), 2) == ["", ""]
    assert {n: svc.node_of(n) for n in nodes} == nodes
    assert svc.store.reservations == {}
    svc.check_invariants()
