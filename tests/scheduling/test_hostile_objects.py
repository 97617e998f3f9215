"""Hostile or malformed objects reaching the cache (a CRD without its schema, a `--cluster` file): each
is refused by its own gang with the field named, and costs nothing to other pods, the read-only views
or the verbs' latency."""

from __future__ import annotations

import orjson
import pytest

from extender.grouping.base import GroupingError
from extender.grouping.kai import external_group
from tests.builders import gang_pod, make_kai_podgroup, make_pod, rack_cluster


def kai_queue(name: str, parent: str | None = None) -> dict:
    spec: dict = {"resources": {"cpu": {"quota": -1, "limit": -1}, "memory": {"quota": -1, "limit": -1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


async def test_a_podgroup_with_a_numeric_queue_is_refused_alone(make_service) -> None:
    """KAI's CRD types spec.queue a string; without the schema a number made every filter in the
    cluster an internal error and /debug and /metrics answer 500 (found by review)."""
    pg = make_kai_podgroup("a", min_member=2, queue="leaf")
    pg["spec"]["queue"] = 5
    objs = [*rack_cluster(), kai_queue("leaf"), kai_queue("default-queue"), pg]
    objs += [gang_pod("a-0", "a"), gang_pod("a-1", "a"), make_pod("plain")]
    svc = await make_service(objs)
    refused = await svc.filter("a-0")
    assert "spec.queue: must be a string, not int" in refused["Error"] + str(refused["FailedNodes"]), refused
    doc = await svc.filter("plain")
    assert not doc["Error"] and doc["NodeNames"], doc
    for path in ("/debug/gangs", "/debug/queues", "/metrics"):
        resp = await svc.client.get(path)
        assert resp.status == 200, (path, await resp.text())


@pytest.mark.parametrize(
    ("spec", "field", "said"),
    [
        pytest.param({"queue": ["q"]}, "spec.queue", "must be a string, not list", id="queue a list"),
        pytest.param(
            {"priorityClassName": 7}, "spec.priorityClassName", "not int", id="priority class a number"
        ),
        pytest.param(
            {"subGroups": [{"name": {"a": 1}, "minMember": 1}]},
            "spec.subGroups[0].name",
            "not dict",
            id="sub name",
        ),
        pytest.param(
            {"subGroups": [{"name": "a", "parent": ["b"], "minMember": 1}]},
            "spec.subGroups[0].parent",
            "not list",
            id="parent a list",
        ),
        pytest.param(
            {"topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "k" * 10_000}},
            "spec.topologyConstraint.requiredTopologyLevel",
            "is not a name (one word, at most 317 characters)",
            id="a level of 10 KB",
        ),
        pytest.param(
            {"topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack\n2026 INFO forged"}},
            "spec.topologyConstraint.requiredTopologyLevel",
            "'rack\\\\n2026 INFO forged' is not a name",
            id="a level of two lines",
        ),
    ],
)
def test_a_kai_podgroups_names_are_one_line_strings(spec: dict, field: str, said: str) -> None:
    pg = make_kai_podgroup("a", min_member=1)
    pg["spec"].update(spec)
    with pytest.raises(GroupingError) as err:
        external_group(pg)
    assert err.value.field == field and said in str(err.value), str(err.value)
    assert len(str(err.value)) < 200 and "\n" not in str(err.value)


async def test_a_read_only_view_that_fails_answers_503_with_why(make_service, monkeypatch) -> None:
    svc = await make_service([*rack_cluster(), make_pod("plain")])

    def broken() -> list:
        raise RuntimeError("a reader's bug")

    monkeypatch.setattr(svc.scheduler, "describe_all", broken)
    resp = await svc.client.get("/debug/gangs")
    assert resp.status == 503
    assert 'internal error reading /debug/gangs: RuntimeError("a reader\'s bug")' in await resp.text()
    doc = await svc.filter("plain")
    assert doc["NodeNames"] and not doc["Error"], orjson.dumps(doc)


def test_a_chain_of_thousands_of_queues_is_cut_at_max_depth_and_what_is_below_takes_nothing() -> None:
    """2,000 Queues in one parent chain: every admission walks a queue's ancestors, and the queue book
    sums each queue's use into every one of them, so each filter after any change cost O(queues x
    depth), seconds (found by review). The chain is cut at MAX_QUEUE_DEPTH levels; the queue at the
    cut and every queue below it take no workloads, or they would escape the limits above the cut
    (found by review of the first cut)."""
    from extender.scheduling.queues import MAX_QUEUE_DEPTH, read_tree

    qs = [kai_queue("q0")] + [kai_queue(f"q{i}", f"q{i - 1}") for i in range(1, 2000)]
    tree = read_tree(qs)
    d = MAX_QUEUE_DEPTH
    assert max(len(tree.ancestors(q)) for q in tree.queues) == d
    assert all(tree.usable(f"q{i}") for i in range(d))
    assert not any(tree.usable(f"q{i}") for i in range(d, 2000))
    deep = f"more than {d} levels below its top queue"
    assert tree.errors[f"q{d}"] == f"spec.parentQueue: queue q{d} is {deep}"
    assert tree.errors[f"q{d + 1}"] == f"spec.parentQueue: queue q{d + 1} sits below queue q{d}, {deep}"


def test_a_queue_below_the_cut_cannot_escape_its_top_queues_limit() -> None:
    """q00 (gpu limit 0) tops a chain of 18 queues: the leaf q17, below the cut, is no queue that
    takes workloads, not one whose only ancestor is the cut queue (found by review: its gang was
    admitted past the limit of 0 GPUs its top queue sets)."""
    from extender.scheduling.decisions import Verdict
    from tests.scheduling.test_queues import World, gpu_nodes
    from tests.scheduling.test_queues import kai_queue as queue

    chain = [queue("q00", gpu={"quota": 0, "limit": 0})]
    chain += [queue(f"q{i:02d}", f"q{i - 1:02d}", gpu={"quota": 0, "limit": -1}) for i in range(1, 18)]
    w = World([*gpu_nodes(2), *chain])
    members = w.gang("g", 1, "q17", gpu="8")
    decision = w.filter(members[0])
    assert decision.verdict is not Verdict.PASS, decision.reason
    assert "sits below queue q16" in decision.reason, decision.reason


def test_a_long_cycle_of_parent_queues_is_found_and_cut() -> None:
    from extender.scheduling.queues import read_tree

    n = 3000
    qs = [kai_queue(f"c{i}", f"c{(i + 1) % n}") for i in range(n)] + [kai_queue("leaf", "c0")]
    tree = read_tree(qs)
    assert len([q for q, why in tree.errors.items() if "in a cycle of parent queues" in why]) == n
    assert tree.usable("leaf")


async def test_a_reason_built_from_a_huge_cached_name_is_one_bounded_line(make_service) -> None:
    """A 1.37 PodGroup naming a topology key of 10 KB with a newline: whatever reason names it, the
    reply carries one line of at most REPLY_REASON_CHARS per node (found by review: 10,073
    characters on each of 16 nodes, a newline starting a second line)."""
    from extender.server.wire import REPLY_REASON_CHARS

    key = "example.com/" + "k" * 10_000 + "\nforged"
    pg = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": key}]},
        },
    }
    pods = [make_pod(f"g-{i}", scheduling_group="g") for i in range(2)]
    svc = await make_service([*rack_cluster(), pg, *pods])
    doc = await svc.filter("g-0")
    reasons = [*doc["FailedNodes"].values(), *doc["FailedAndUnresolvableNodes"].values(), doc["Error"]]
    assert any(reasons), doc
    for reason in reasons:
        assert len(reason) <= REPLY_REASON_CHARS + 1 and "\n" not in reason, reason[:200]


async def test_a_required_level_no_node_has_says_so_and_adds_no_level(make_service) -> None:
    """Every node has room, none the label: the reason names the label, not a cpu shortage (found by
    review), and the key is not made a level of the cluster's arrays (a group naming thousands
    of keys added a level each, one np.vstack of every row's domains apiece: 32 s for one filter)."""
    pg = make_kai_podgroup("a", min_member=2, topology={"requiredTopologyLevel": "example.com/none"})
    svc = await make_service([*rack_cluster(), pg, gang_pod("a-0", "a"), gang_pod("a-1", "a")])
    levels = svc.store.arrays.n_levels
    doc = await svc.filter("a-0")
    reason = next(iter(doc["FailedNodes"].values()))
    assert "no node has the label 'example.com/none'" in reason and "cpu short" not in reason, reason
    assert svc.store.arrays.n_levels == levels


async def test_thousands_of_subgroup_levels_no_node_has_register_none(make_service) -> None:
    subs = [
        {
            "name": f"s{i}",
            "minMember": 1,
            "topologyConstraint": {"requiredTopologyLevel": f"example.com/k{i}"},
        }
        for i in range(3000)
    ]
    pg = make_kai_podgroup("a", subgroups=subs)
    pg["spec"]["minSubGroup"] = 1
    pod = gang_pod("a-0", "a", labels={"kai.scheduler/subgroup-name": "s0"})
    svc = await make_service([*rack_cluster(), pg, pod])
    levels = svc.store.arrays.n_levels
    doc = await svc.filter("a-0")
    assert not doc["NodeNames"]
    assert svc.store.arrays.n_levels == levels


def test_a_preferred_level_no_node_has_is_dropped_and_a_required_one_refused() -> None:
    from extender.model.group import TopologyConstraint
    from extender.scheduling.topology import TopologyError, resolve

    class Nodes:
        def get(self, *_: object) -> None:
            return None

        def carries_label(self, key: str) -> bool:
            return key == "topology.kubernetes.io/rack"

    soft = resolve(TopologyConstraint(None, "topology.kubernetes.io/rack", "example.com/none"), Nodes())
    assert soft.required == "topology.kubernetes.io/rack" and soft.preferred is None
    with pytest.raises(TopologyError, match=r"no node has the label 'example\.com/none'"):
        resolve(TopologyConstraint(None, "example.com/none", None), Nodes())


async def test_a_node_offering_a_negative_amount_is_a_node_offering_none(make_service) -> None:
    """A Node (from a file: the API server refuses it) with a negative allocatable was skipped by the
    store, yet kube-scheduler lists it: every verb for every pod answered 400 "unknown node" (found by
    review). It is a node offering none of that resource."""
    from tests.builders import make_node

    bad = make_node("bad")
    bad["status"]["allocatable"]["example.com/dongle"] = "-1"
    svc = await make_service([*rack_cluster(), bad, make_pod("plain")])
    assert svc.cluster.bad_objects == 0
    resp = await svc.client.post(
        "/filter", data=orjson.dumps({"Pod": svc.pod("plain"), "Nodes": None, "NodeNames": ["bad", "n000"]})
    )
    assert resp.status == 200, await resp.text()
    assert set((await resp.json())["NodeNames"]) == {"bad", "n000"}


async def test_a_node_offering_thousands_of_resource_names_grows_no_column_past_the_cap(make_service) -> None:
    """One Node offering 4,000 extended resources grew every row by as many columns, for good, each
    new one walking every pod (found by review: 80 MB at 1,024 rows). Names past the cap are taken
    as not offered."""
    from extender.state.store import MAX_RESOURCE_COLUMNS
    from tests.builders import make_node

    wide = make_node("wide")
    wide["status"]["allocatable"].update({f"example.com/r{i}": "1" for i in range(4000)})
    svc = await make_service([*rack_cluster(), wide, make_pod("plain")])
    assert (
        len(svc.store.resources) == MAX_RESOURCE_COLUMNS
        and svc.store.arrays.n_res <= 2 * MAX_RESOURCE_COLUMNS
    )
    doc = await svc.filter("plain")
    assert doc["NodeNames"] and not doc["Error"], doc
